//! Go values to text as go-spew's `%#v` formatter writes them (`spew/format.go` of
//! github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc) with `dump.ForHash`'s
//! configuration: `(type)value`, except where spew omits the type (slice elements, map keys
//! and values, the value behind a pointer), pointers as `(*T)value` or `(*T)<nil>`, nil
//! slices and maps `<nil>`, strings unquoted, maps as `map[k:v k:v]` with sorted keys,
//! structs as `{Field:value Field:value}` in Go order.

use std::fmt::Write as _;

use super::{GoHashError, GoValue, Kind, Schema};

/// The formatter's state: spew's `formatState` (`depth` and `pointers` only detect cycles,
/// which decoded JSON has none of).
struct Printer<'a> {
    schema: &'a Schema,
    out: String,
    ignore_next_type: bool,
}

/// `dump.ForHash` of `value` of type `name`.
pub(super) fn format(schema: &Schema, name: &str, value: &GoValue) -> Result<String, GoHashError> {
    let mut printer = Printer {
        schema,
        out: String::with_capacity(4096),
        ignore_next_type: false,
    };
    printer.format(name, value)?;
    Ok(printer.out)
}

impl Printer<'_> {
    /// spew's `formatState.format`.
    fn format(&mut self, name: &str, value: &GoValue) -> Result<(), GoHashError> {
        let ty = self.schema.ty(name)?;
        if ty.kind == Kind::Ptr {
            return self.format_ptr(name, value);
        }
        if !self.ignore_next_type {
            self.out.push('(');
            self.out.push_str(name);
            self.out.push(')');
        }
        self.ignore_next_type = false;
        match value {
            GoValue::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            GoValue::Int(n) => {
                let _ = write!(self.out, "{n}");
            }
            GoValue::Uint(n) => {
                let _ = write!(self.out, "{n}");
            }
            GoValue::Str(s) => self.out.push_str(s),
            GoValue::Nil => self.out.push_str("<nil>"),
            GoValue::List(items) => {
                let elem = self.schema.elem(ty, name)?;
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(' ');
                    }
                    self.ignore_next_type = true;
                    self.format(elem, item)?;
                }
                self.out.push(']');
            }
            GoValue::Map(entries) => self.format_map(name, entries)?,
            GoValue::Struct(fields) => {
                self.out.push('{');
                for (i, (field, value)) in ty.fields.iter().zip(fields).enumerate() {
                    if i > 0 {
                        self.out.push(' ');
                    }
                    self.out.push_str(&field.go);
                    self.out.push(':');
                    self.format(&field.ty, value)?;
                }
                self.out.push('}');
            }
            GoValue::Ptr(_) => return Err(GoHashError::UnknownType(format!("pointer as {name}"))),
        }
        Ok(())
    }

    /// A map with `SortKeys`: string keys in byte order, key and value without types.
    fn format_map(&mut self, name: &str, entries: &[(String, GoValue)]) -> Result<(), GoHashError> {
        let ty = self.schema.ty(name)?;
        let elem = self.schema.elem(ty, name)?;
        let mut sorted: Vec<&(String, GoValue)> = entries.iter().collect();
        sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        self.out.push_str("map[");
        for (i, (key, value)) in sorted.into_iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            self.out.push_str(key);
            self.out.push(':');
            self.ignore_next_type = true;
            self.format(elem, value)?;
        }
        self.out.push(']');
        Ok(())
    }

    /// spew's `formatState.formatPtr` with the `#` flag.
    fn format_ptr(&mut self, name: &str, value: &GoValue) -> Result<(), GoHashError> {
        if *value == GoValue::Nil && self.ignore_next_type {
            self.out.push_str("<nil>");
            return Ok(());
        }
        // Follow the pointer chain: `indirects` non-nil pointers, ending at a nil pointer
        // (type `ty`) or at a non-pointer value of type `ty`.
        let mut indirects = 0;
        let mut ty = name;
        let mut current = value;
        let mut nil = false;
        while self.schema.ty(ty)?.kind == Kind::Ptr {
            match current {
                GoValue::Ptr(inner) => {
                    indirects += 1;
                    ty = self.schema.elem(self.schema.ty(ty)?, ty)?;
                    current = inner;
                }
                _ => {
                    nil = true;
                    break;
                }
            }
        }
        if self.ignore_next_type {
            let stars = indirects + if nil { ty.matches('*').count() } else { 0 };
            self.out.push('<');
            self.out.push_str(&"*".repeat(stars));
            self.out.push('>');
        } else {
            self.out.push('(');
            self.out.push_str(&"*".repeat(indirects));
            self.out.push_str(ty);
            self.out.push(')');
        }
        if nil {
            self.out.push_str("<nil>");
            return Ok(());
        }
        self.ignore_next_type = true;
        self.format(ty, current)
    }
}
