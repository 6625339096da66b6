//! The step every defaulting function of upstream (`SetDefaults_*`) is made of, shared by the kinds' strategies.

use serde_json::Value;

/// Sets `key` to `value` when it is absent or null.
pub fn set_default(object: &mut Value, key: &str, value: Value) {
    if let Some(fields) = object.as_object_mut()
        && fields.get(key).is_none_or(Value::is_null)
    {
        fields.insert(key.to_owned(), value);
    }
}
