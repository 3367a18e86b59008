//! Kthena's resource types.
