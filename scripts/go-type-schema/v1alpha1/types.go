// Package v1alpha1 declares the workload types that Go Kthena v1.0.0 hashes into a
// ModelServing revision, with the same names, field order, field types and JSON tags as
// pkg/apis/workload/v1alpha1/servinggroup_types.go of github.com/volcano-sh/kthena
// (declared here rather than imported, so the generator only needs k8s.io modules). The
// package is named v1alpha1 so that reflect.Type.String() gives Go's type strings.
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Role is Go Kthena's v1alpha1.Role.
type Role struct {
	Name           string              `json:"name"`
	Replicas       *int32              `json:"replicas,omitempty"`
	EntryTemplate  PodTemplateSpec     `json:"entryTemplate"`
	WorkerReplicas int32               `json:"workerReplicas"`
	WorkerTemplate *PodTemplateSpec    `json:"workerTemplate,omitempty"`
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// PodTemplateSpec is Go Kthena's v1alpha1.PodTemplateSpec.
type PodTemplateSpec struct {
	Metadata *Metadata      `json:"metadata,omitempty"`
	Spec     corev1.PodSpec `json:"spec,omitempty"`
}

// Metadata is Go Kthena's v1alpha1.Metadata.
type Metadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}
