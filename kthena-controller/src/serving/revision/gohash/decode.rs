//! JSON to Go values as Go's JSON decoder (`sigs.k8s.io/json`, case-sensitive, used by the
//! informers' serializer) leaves them: an absent key or `null` keeps the zero value (a nil
//! pointer, slice or map), `[]` and `{}` make empty non-nil slices and maps, unknown keys are
//! ignored, embedded structs without a JSON name take their fields from the same object.

use serde_json::Value;

use super::{Custom, GoHashError, GoType, GoValue, Kind, Schema, quantity};

/// The zero value of `name`.
pub(super) fn zero(schema: &Schema, name: &str) -> Result<GoValue, GoHashError> {
    let ty = schema.ty(name)?;
    Ok(match ty.kind {
        Kind::Bool => GoValue::Bool(false),
        Kind::String => GoValue::Str(String::new()),
        Kind::Int => GoValue::Int(0),
        Kind::Uint => GoValue::Uint(0),
        Kind::Ptr | Kind::Slice | Kind::Map => GoValue::Nil,
        Kind::Struct => GoValue::Struct(
            ty.fields
                .iter()
                .map(|f| zero(schema, &f.ty))
                .collect::<Result<_, _>>()?,
        ),
    })
}

fn mismatch(path: &str, name: &str, json: &Value) -> GoHashError {
    let mut found = json.to_string();
    if found.len() > 40 {
        let cut = (0..=40)
            .rev()
            .find(|&i| found.is_char_boundary(i))
            .unwrap_or(0);
        found.truncate(cut);
        found.push('…');
    }
    GoHashError::Mismatch {
        path: if path.is_empty() {
            ".".to_owned()
        } else {
            path.to_owned()
        },
        go_type: name.to_owned(),
        found,
    }
}

/// Decodes `json` (`None`: the key is absent) into the Go value of type `name`; `path` is
/// the JSON path so far, for errors.
pub(super) fn decode(
    schema: &Schema,
    name: &str,
    json: Option<&Value>,
    path: &mut String,
) -> Result<GoValue, GoHashError> {
    let ty = schema.ty(name)?;
    let Some(json) = json else {
        return zero(schema, name);
    };
    if let Some(custom) = ty.json {
        return decode_custom(schema, custom, name, json, path);
    }
    if json.is_null() {
        return zero(schema, name);
    }
    match ty.kind {
        Kind::Bool => json.as_bool().map(GoValue::Bool),
        Kind::String => json.as_str().map(|s| GoValue::Str(s.to_owned())),
        Kind::Int => json
            .as_i64()
            .filter(|&n| fits_int(n, ty.bits))
            .map(GoValue::Int),
        Kind::Uint => json
            .as_u64()
            .filter(|&n| ty.bits >= 64 || n >> ty.bits == 0)
            .map(GoValue::Uint),
        Kind::Ptr => {
            let elem = schema.elem(ty, name)?;
            return Ok(GoValue::Ptr(Box::new(decode(
                schema,
                elem,
                Some(json),
                path,
            )?)));
        }
        Kind::Slice => return decode_slice(schema, ty, name, json, path),
        Kind::Map => return decode_map(schema, ty, name, json, path),
        Kind::Struct => return decode_struct(schema, ty, name, json, path),
    }
    .ok_or_else(|| mismatch(path, name, json))
}

fn fits_int(n: i64, bits: u32) -> bool {
    bits >= 64 || (n >> (bits - 1) == 0 || n >> (bits - 1) == -1)
}

fn decode_slice(
    schema: &Schema,
    ty: &GoType,
    name: &str,
    json: &Value,
    path: &mut String,
) -> Result<GoValue, GoHashError> {
    let items = json.as_array().ok_or_else(|| mismatch(path, name, json))?;
    let elem = schema.elem(ty, name)?;
    let len = path.len();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        path.push_str(&format!("[{i}]"));
        out.push(decode(schema, elem, Some(item), path)?);
        path.truncate(len);
    }
    Ok(GoValue::List(out))
}

fn decode_map(
    schema: &Schema,
    ty: &GoType,
    name: &str,
    json: &Value,
    path: &mut String,
) -> Result<GoValue, GoHashError> {
    let object = json.as_object().ok_or_else(|| mismatch(path, name, json))?;
    let elem = schema.elem(ty, name)?;
    let len = path.len();
    let mut out = Vec::with_capacity(object.len());
    for (key, item) in object {
        path.push_str(&format!("[{key:?}]"));
        out.push((key.clone(), decode(schema, elem, Some(item), path)?));
        path.truncate(len);
    }
    Ok(GoValue::Map(out))
}

fn decode_struct(
    schema: &Schema,
    ty: &GoType,
    name: &str,
    json: &Value,
    path: &mut String,
) -> Result<GoValue, GoHashError> {
    let object = json.as_object().ok_or_else(|| mismatch(path, name, json))?;
    let len = path.len();
    let mut out = Vec::with_capacity(ty.fields.len());
    for field in &ty.fields {
        let value = if field.inline {
            decode(schema, &field.ty, Some(json), path)?
        } else if let Some(key) = &field.json {
            path.push('.');
            path.push_str(key);
            let value = decode(schema, &field.ty, object.get(key), path)?;
            path.truncate(len);
            value
        } else {
            zero(schema, &field.ty)?
        };
        out.push(value);
    }
    Ok(GoValue::Struct(out))
}

/// Types with their own `UnmarshalJSON`.
fn decode_custom(
    schema: &Schema,
    custom: Custom,
    name: &str,
    json: &Value,
    path: &str,
) -> Result<GoValue, GoHashError> {
    match custom {
        // `resource.Quantity.UnmarshalJSON`: `null` leaves the zero quantity; a string or a
        // number is parsed by `ParseQuantity`.
        Custom::Quantity => match json {
            Value::Null => zero(schema, name),
            Value::String(s) => quantity::decode(s.trim(), path),
            Value::Number(n) => quantity::decode(&n.to_string(), path),
            _ => Err(mismatch(path, name, json)),
        },
        // `intstr.IntOrString.UnmarshalJSON`: a string is {Type: 1, StrVal}; anything else
        // is decoded into IntVal with Type 0.
        Custom::IntOrString => match json {
            Value::String(s) => Ok(int_or_string(1, 0, s)),
            Value::Null => Ok(int_or_string(0, 0, "")),
            _ => json
                .as_i64()
                .filter(|&n| fits_int(n, 32))
                .map(|n| int_or_string(0, n, ""))
                .ok_or_else(|| mismatch(path, name, json)),
        },
        Custom::Time | Custom::FieldsV1 | Custom::Duration => match json {
            Value::Null => zero(schema, name),
            _ => Err(GoHashError::Unsupported {
                path: path.to_owned(),
                what: "a set timestamp, duration or managed-fields entry",
            }),
        },
    }
}

fn int_or_string(kind: i64, int: i64, s: &str) -> GoValue {
    GoValue::Struct(vec![
        GoValue::Int(kind),
        GoValue::Int(int),
        GoValue::Str(s.to_owned()),
    ])
}
