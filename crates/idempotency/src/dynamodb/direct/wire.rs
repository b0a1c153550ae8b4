//! DynamoDB's JSON API on the wire: the request body the client writes (without an intermediate
//! document), and the answer it reads (an applied write's old item, or an error's code).

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::error::DirectError;

/// The JSON API's content type.
pub(super) const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// An item as the store reads it.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// What DynamoDB did with a conditional write.
#[derive(Debug)]
pub(crate) enum Written {
    /// Applied; the old item when one was asked for and existed.
    Applied(Option<Item>),
    /// The condition failed; the old item when one was asked for.
    Refused(Option<Item>),
}

/// One conditional write: an `UpdateItem` (with `update`) or a `DeleteItem` (without).
///
/// Its key and values are borrowed from the store's call and written straight into the request
/// body: building a `HashMap` of the SDK's `AttributeValue`s per write (a string for each of a
/// claim's fourteen values, the key's map) and walking it again was the store's largest cost
/// after the SDK itself.
#[derive(Debug)]
pub(crate) struct Write<'a> {
    pub table: &'a str,
    pub key: Key<'a>,
    pub update: Option<&'a str>,
    pub condition: &'a str,
    pub names: Vec<(&'a str, &'a str)>,
    pub values: Vec<(&'a str, Val<'a>)>,
    /// `ReturnValues = ALL_OLD`.
    pub old_on_success: bool,
    /// `ReturnValuesOnConditionCheckFailure = ALL_OLD`.
    pub old_on_failure: bool,
}

/// An item's key: the attribute that holds the store's key (prefixed), and in a single-table
/// design the partition every item of the store is written under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key<'a> {
    pub attribute: &'a str,
    pub prefix: &'a str,
    pub key: &'a str,
    /// The partition key's attribute and value, when `attribute` is the sort key.
    pub partition: Option<(&'a str, &'a str)>,
}

impl Key<'_> {
    /// The key as the SDK's client takes it.
    pub(crate) fn to_item(self) -> Item {
        let mut item = HashMap::with_capacity(2);
        item.insert(
            self.attribute.to_owned(),
            AttributeValue::S(format!("{}{}", self.prefix, self.key)),
        );
        if let Some((attribute, value)) = self.partition {
            item.insert(attribute.to_owned(), AttributeValue::S(value.to_owned()));
        }
        item
    }
}

/// A value of a write's expressions: a string (borrowed, or written by its `Display`) or a
/// number, the only types the store writes.
#[derive(Clone, Copy)]
pub(crate) enum Val<'a> {
    S(&'a str),
    /// A string written by its `Display` (a lease token, a fingerprint), never kept as one.
    Shown(&'a (dyn fmt::Display + Sync)),
    N(u64),
}

impl Val<'_> {
    /// The value as the SDK's client takes it.
    pub(crate) fn to_attribute(self) -> AttributeValue {
        match self {
            Self::S(text) => AttributeValue::S(text.to_owned()),
            Self::Shown(shown) => AttributeValue::S(shown.to_string()),
            Self::N(number) => AttributeValue::N(number.to_string()),
        }
    }
}

impl fmt::Debug for Val<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::S(text) => f.debug_tuple("S").field(text).finish(),
            Self::Shown(shown) => f.debug_tuple("S").field(&shown.to_string()).finish(),
            Self::N(number) => f.debug_tuple("N").field(number).finish(),
        }
    }
}

/// Reads DynamoDB's answer: 2xx with `Attributes`, or an error named by the `x-amzn-errortype`
/// header or the body's `code` or `__type` (a failed condition brings the old `Item` when it
/// was asked for).
pub(super) fn read_answer(
    status: u16,
    error_type: Option<&str>,
    bytes: &[u8],
) -> Result<Written, DirectError> {
    let unreadable = |source: Box<dyn std::error::Error + Send + Sync>| DirectError::Unreadable {
        status,
        source,
    };
    let json: Value = if bytes.is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(bytes).map_err(|e| unreadable(Box::new(e)))?
    };
    let Some(json) = json.as_object() else {
        return Err(unreadable("an answer that is not a JSON object".into()));
    };
    let items = |name: &str| match json.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(found) => item(found).map(Some).map_err(|e| unreadable(e.into())),
    };
    if (200..300).contains(&status) {
        return Ok(Written::Applied(items("Attributes")?));
    }
    let kind = error_type
        .or_else(|| json.get("code").and_then(Value::as_str))
        .or_else(|| json.get("__type").and_then(Value::as_str))
        .map(error_code)
        .unwrap_or("")
        .to_owned();
    if kind == "ConditionalCheckFailedException" {
        return Ok(Written::Refused(items("Item")?));
    }
    let message = json
        .get("message")
        .or_else(|| json.get("Message"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    Err(DirectError::Service {
        status,
        kind,
        message,
    })
}

/// An error code without its namespace (`com.amazonaws.dynamodb.v20120810#`) and without a
/// trailing `:` and URL, as AWS's JSON protocols send it.
fn error_code(raw: &str) -> &str {
    let raw = raw.split(':').next().unwrap_or(raw);
    raw.rsplit('#').next().unwrap_or(raw)
}

/// An item in DynamoDB's JSON (`{"name": {"S": "..."}}`).
pub(super) fn item(json: &Value) -> Result<Item, String> {
    let object = json.as_object().ok_or("an item that is not an object")?;
    object
        .iter()
        .map(|(name, value)| Ok((name.clone(), attribute(value)?)))
        .collect()
}

fn attribute(json: &Value) -> Result<AttributeValue, String> {
    let object = json
        .as_object()
        .filter(|o| o.len() == 1)
        .ok_or_else(|| "an attribute value that is not an object of one type".to_owned())?;
    let (kind, value) = object.iter().next().ok_or("an empty attribute value")?;
    let text = || {
        value
            .as_str()
            .map(str::to_owned)
            .ok_or(format!("{kind} is not a string"))
    };
    let texts = || {
        value
            .as_array()
            .ok_or(format!("{kind} is not a list"))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or(format!("{kind} holds a non-string"))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let blob = |b: &str| {
        aws_smithy_types::base64::decode(b)
            .map(aws_smithy_types::Blob::new)
            .map_err(|e| e.to_string())
    };
    Ok(match kind.as_str() {
        "S" => AttributeValue::S(text()?),
        "N" => AttributeValue::N(text()?),
        "BOOL" => AttributeValue::Bool(value.as_bool().ok_or("BOOL is not a boolean")?),
        "NULL" if value == &Value::Bool(true) => AttributeValue::Null(true),
        "NULL" => return Err("NULL is not true".into()),
        "B" => AttributeValue::B(blob(&text()?)?),
        "SS" => AttributeValue::Ss(texts()?),
        "NS" => AttributeValue::Ns(texts()?),
        "BS" => AttributeValue::Bs(texts()?.iter().map(|b| blob(b)).collect::<Result<_, _>>()?),
        "M" => AttributeValue::M(item(value)?),
        "L" => AttributeValue::L(
            value
                .as_array()
                .ok_or("L is not a list")?
                .iter()
                .map(attribute)
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(format!("unknown attribute type {other}")),
    })
}

/// The request's JSON body.
pub(super) fn request_body(write: &Write<'_>) -> Result<Vec<u8>, serde_json::Error> {
    struct Body<'r, 'a>(&'r Write<'a>);
    impl Serialize for Body<'_, '_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let w = self.0;
            let mut map = serializer.serialize_map(None)?;
            map.serialize_entry("TableName", w.table)?;
            map.serialize_entry("Key", &w.key)?;
            if let Some(update) = w.update {
                map.serialize_entry("UpdateExpression", update)?;
            }
            map.serialize_entry("ConditionExpression", w.condition)?;
            map.serialize_entry("ExpressionAttributeNames", &Names(&w.names))?;
            map.serialize_entry("ExpressionAttributeValues", &Values(&w.values))?;
            if w.old_on_success {
                map.serialize_entry("ReturnValues", "ALL_OLD")?;
            }
            if w.old_on_failure {
                map.serialize_entry("ReturnValuesOnConditionCheckFailure", "ALL_OLD")?;
            }
            map.end()
        }
    }
    struct Names<'r>(&'r [(&'r str, &'r str)]);
    impl Serialize for Names<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(self.0.len()))?;
            for (placeholder, name) in self.0 {
                map.serialize_entry(placeholder, name)?;
            }
            map.end()
        }
    }
    struct Values<'r, 'a>(&'r [(&'a str, Val<'a>)]);
    impl Serialize for Values<'_, '_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(self.0.len()))?;
            for (placeholder, value) in self.0 {
                map.serialize_entry(placeholder, &Typed(*value))?;
            }
            map.end()
        }
    }
    // A claim's body is about 1.2 KB: one allocation, not the doubling from empty.
    let mut body = Vec::with_capacity(BODY_CAPACITY);
    serde_json::to_writer(&mut body, &Body(write))?;
    Ok(body)
}

/// The request body's first allocation: a claim's body, the largest, fits.
const BODY_CAPACITY: usize = 2048;

/// `{"attribute": {"S": "<prefix><key>"}}`, and the partition's beside it.
impl Serialize for Key<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Prefixed<'r>(&'r str, &'r str);
        impl fmt::Display for Prefixed<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)?;
                f.write_str(self.1)
            }
        }
        let mut map = serializer.serialize_map(Some(1 + usize::from(self.partition.is_some())))?;
        let prefixed = Prefixed(self.prefix, self.key);
        map.serialize_entry(self.attribute, &Typed(Val::Shown(&prefixed)))?;
        if let Some((attribute, value)) = self.partition {
            map.serialize_entry(attribute, &Typed(Val::S(value)))?;
        }
        map.end()
    }
}

/// A value's text, written in place (`collect_str` escapes as it writes, with no `String`).
impl Serialize for Val<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::S(text) => serializer.serialize_str(text),
            Self::Shown(shown) => serializer.collect_str(shown),
            Self::N(number) => serializer.collect_str(number),
        }
    }
}

/// One value with its type: `{"S": "..."}` or `{"N": "..."}`.
struct Typed<'a>(Val<'a>);

impl Serialize for Typed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        let kind = match self.0 {
            Val::S(_) | Val::Shown(_) => "S",
            Val::N(_) => "N",
        };
        map.serialize_entry(kind, &self.0)?;
        map.end()
    }
}
