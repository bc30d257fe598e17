//! Every bound a request's value is held to, declared once (TigerBeetle's `constants.zig`): a
//! constant, and a type that checks it as it is deserialized and states it as its own JSON
//! Schema (feature `openapi`). The store checks against the constants, the wire types of
//! `inbox-api` are these types, the OpenAPI document states what they state, the MCP tools'
//! schemas name the constants, and the clients read them from the document: a limit changed
//! here changes everywhere, and no other place writes it.
//!
//! A bound that is a server's setting (the longest lease, long poll or stream ticket) is not a
//! constant: its type checks only what no setting changes (a lease lasts at least a second),
//! the server checks its setting, and the document it serves states the setting
//! (`inbox-server`'s `http/openapi.rs`).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};

/// Longest reason an agent or operator gives (a quarantine's, a failure's, a release's), in
/// bytes of UTF-8, on one line.
pub const REASON_BYTES_MAX: usize = 200;
/// Longest retry delay a release may ask for: one week.
pub const RETRY_AFTER_SECONDS_MAX: u64 = 7 * 86_400;
/// Most events one poll, claim, acknowledgement, heartbeat or operator's batch may name or
/// return.
pub const BATCH_EVENTS_MAX: u32 = 500;
/// Most recipients one publish (or room) may reach.
pub const FANOUT_RECIPIENTS_MAX: usize = 1_000;
/// Most publishes one hand-off (an acknowledgement's `follow_ups`) may carry.
pub const FOLLOW_UPS_MAX: usize = 16;
/// Most delivery attempts a publisher may give an event before it is dead-lettered.
pub const DELIVERY_ATTEMPTS_MAX: u32 = 1_000;
/// Longest device id a session names, in bytes.
pub const DEVICE_ID_BYTES_MAX: usize = 128;
/// Longest meeting-room name, in bytes.
pub const ROOM_NAME_BYTES_MAX: usize = 200;
/// Most sessions one operator's listing returns.
pub const SESSIONS_LIST_MAX: u32 = 1_000;
/// The longest lease a server allows unless configured otherwise (its `lease_max`): what a
/// client that has not asked the server (the MCP tools' schemas) may assume.
pub const LEASE_SECONDS_MAX_DEFAULT: u64 = 3_600;
/// Longest a stream ticket or cookie may last whatever the settings say.
pub const CREDENTIAL_TTL_SECONDS_MAX: u64 = 86_400;
/// Most deliveries per minute a callback registration may ask for.
pub const CALLBACK_RATE_PER_MINUTE_MAX: u32 = 600;
/// Shortest and longest replay window a callback registration may name, in seconds.
pub const REPLAY_WINDOW_SECONDS_MIN: u32 = 60;
pub const REPLAY_WINDOW_SECONDS_MAX: u32 = 86_400;
/// Longest a rotated callback secret keeps signing beside the new one: 7 days.
pub const SECRET_OVERLAP_SECONDS_MAX: u64 = 7 * 86_400;
/// Longest a retired agent key keeps verifying: 7 days.
pub const KEY_RETIRE_AFTER_SECONDS_MAX: u64 = 7 * 86_400;
/// Longest window of the operators' activity view, in minutes: one day.
pub const ACTIVITY_MINUTES_MAX: u32 = 1_440;
/// The largest `pending_events_max` a tenant policy takes (a trillion events).
pub const TENANT_PENDING_EVENTS_MAX: u64 = 1_000_000_000_000;
/// The largest `stored_bytes_max` a tenant policy takes (1 PiB).
pub const TENANT_STORED_BYTES_MAX: u64 = 1 << 50;

/// Why a value was refused: the rule it broke, as a phrase that follows the field's name
/// (`acks[0].reason is 201 bytes; ...`). The deserializer's path names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LimitError(pub String);

/// Defines a whole number held to `MIN..=MAX`.
macro_rules! bounded_integer {
    ($(#[$doc:meta])* $name:ident($repr:ty), min = $min:expr, max = $max:expr, unit = $unit:literal
     $(, default = $default:expr)? $(; $setting:ident)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name($repr);

        impl $name {
            pub const MIN: $repr = $min;
            pub const MAX: $repr = $max;

            pub fn new(value: $repr) -> Result<Self, LimitError> {
                if !(Self::MIN..=Self::MAX).contains(&value) {
                    return Err(LimitError(format!(
                        "is {value}{}; send between {} and {}{}", $unit, Self::MIN, Self::MAX, $unit
                    )));
                }
                Ok(Self(value))
            }

            /// `value`, which must be in bounds: for constants (a value out of bounds does not
            /// compile).
            pub const fn of(value: $repr) -> Self {
                assert!(value >= Self::MIN && value <= Self::MAX, "out of bounds");
                Self(value)
            }

            /// The nearest value in bounds: for a client that fits what it asks to what the
            /// service takes.
            pub fn saturating(value: $repr) -> Self {
                Self(value.clamp(Self::MIN, Self::MAX))
            }

            pub fn get(self) -> $repr {
                self.0
            }
        }

        $(impl Default for $name {
            fn default() -> Self {
                Self($default)
            }
        })?

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl TryFrom<$repr> for $name {
            type Error = LimitError;
            fn try_from(value: $repr) -> Result<Self, LimitError> {
                Self::new(value)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let raw = <$repr>::deserialize(deserializer)?;
                Self::new(raw).map_err(|e| de::Error::custom(e.0))
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                // A maximum that is a setting is stated by the document each server serves.
                let stated = bounded_integer!(@stated $($setting)?);
                integer_schema(stringify!($repr), Self::MIN as u64, stated.then_some(Self::MAX as u64))
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}
    };
    (@stated) => { true };
    (@stated setting) => { false };
}

/// Defines free text of `MIN..=MAX` bytes on one line (no control characters).
macro_rules! bounded_text {
    ($(#[$doc:meta])* $name:ident, min = $min:expr, max = $max:expr, what = $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl $name {
            pub const BYTES_MIN: usize = $min;
            pub const BYTES_MAX: usize = $max;

            pub fn new(value: impl Into<String>) -> Result<Self, LimitError> {
                let value = value.into();
                if !(Self::BYTES_MIN..=Self::BYTES_MAX).contains(&value.len()) {
                    return Err(LimitError(format!(
                        "is {} bytes; give {} to {} bytes {}",
                        value.len(),
                        Self::BYTES_MIN,
                        Self::BYTES_MAX,
                        $what
                    )));
                }
                if value.chars().any(char::is_control) {
                    return Err(LimitError(
                        "contains control characters (such as a newline); write it on one line".to_owned(),
                    ));
                }
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(deserializer)?;
                Self::new(raw).map_err(|e| de::Error::custom(e.0))
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                text_schema(Self::BYTES_MIN, Self::BYTES_MAX)
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}
    };
}

/// Defines a list of `$min..=$max` items of `$item` (`distinct`: none named twice), refused as
/// soon as it holds one too many, so a long list is never read whole. Used here and by
/// `inbox-api` for lists of its own types; the attributes given (docs, derives) are the
/// list's.
#[macro_export]
macro_rules! bounded_list {
    ($(#[$doc:meta])* $name:ident($item:ty), min = $min:expr, max = $max:expr $(, $distinct:ident)?) => {
        $(#[$doc])*
        pub struct $name(Vec<$item>);

        impl $name {
            pub const MIN: usize = $min;
            pub const MAX: usize = $max;

            pub fn new(items: Vec<$item>) -> Result<Self, $crate::limits::LimitError> {
                $crate::limits::check_list_len(items.len(), Self::MIN, Self::MAX)?;
                $( $crate::bounded_list!(@check_distinct $distinct, &items)?; )?
                Ok(Self(items))
            }

            pub fn into_vec(self) -> Vec<$item> {
                self.0
            }

            pub fn len(&self) -> usize {
                self.0.len()
            }

            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }
        }

        impl std::ops::Deref for $name {
            type Target = [$item];
            fn deref(&self) -> &[$item] {
                &self.0
            }
        }

        impl IntoIterator for $name {
            type Item = $item;
            type IntoIter = std::vec::IntoIter<$item>;
            fn into_iter(self) -> Self::IntoIter {
                self.0.into_iter()
            }
        }

        impl<'a> IntoIterator for &'a $name {
            type Item = &'a $item;
            type IntoIter = std::slice::Iter<'a, $item>;
            fn into_iter(self) -> Self::IntoIter {
                self.0.iter()
            }
        }

        impl TryFrom<Vec<$item>> for $name {
            type Error = $crate::limits::LimitError;
            fn try_from(items: Vec<$item>) -> Result<Self, $crate::limits::LimitError> {
                Self::new(items)
            }
        }

        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $crate::__serde::Serialize::serialize(&self.0, serializer)
            }
        }

        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let check = $crate::bounded_list!(@item_check $($distinct)?);
                $crate::limits::deserialize_list(deserializer, Self::MIN, Self::MAX, check).map(Self)
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                $crate::limits::list_schema(
                    &<$item as utoipa::ToSchema>::name(),
                    Self::MIN,
                    Self::MAX,
                    $crate::bounded_list!(@distinct $($distinct)?),
                )
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {
            fn schemas(
                schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>,
            ) {
                schemas.push((
                    <$item as utoipa::ToSchema>::name().into(),
                    <$item as utoipa::PartialSchema>::schema(),
                ));
                <$item as utoipa::ToSchema>::schemas(schemas);
            }
        }
    };
    (@distinct) => { false };
    (@distinct distinct) => { true };
    (@check_distinct distinct, $items:expr) => { $crate::limits::check_distinct($items) };
    (@item_check) => { |_: &[_], _: &_| None };
    (@item_check distinct) => { $crate::limits::repeated };
}

bounded_text!(
    /// Why an agent or operator did something (a quarantine, a failure): kept on the event and
    /// in its history for the person who reviews it.
    Reason, min = 1, max = REASON_BYTES_MAX, what = "saying why"
);
bounded_text!(
    /// Why an agent gave an event back: like a [`Reason`], but it may be empty.
    ReleaseReason, min = 0, max = REASON_BYTES_MAX, what = "saying why"
);
bounded_text!(
    /// The device a session runs on, as its agent names it.
    DeviceId, min = 1, max = DEVICE_ID_BYTES_MAX, what = "naming the device"
);
bounded_text!(
    /// A meeting room's name.
    RoomName, min = 1, max = ROOM_NAME_BYTES_MAX, what = "naming the room"
);

bounded_integer!(
    /// Seconds before a released event may be claimed again.
    RetryAfterSeconds(u64), min = 0, max = RETRY_AFTER_SECONDS_MAX, unit = " s", default = 0
);
bounded_integer!(
    /// How many events a poll returns or a claim takes, or a page of an operator's listing.
    BatchLimit(u32), min = 1, max = BATCH_EVENTS_MAX, unit = ""
);
bounded_integer!(
    /// How many sessions an operator's listing returns.
    SessionsLimit(u32), min = 1, max = SESSIONS_LIST_MAX, unit = ""
);
bounded_integer!(
    /// A lease's length (a claim's) or extension (a heartbeat's), in seconds: at least one; at
    /// most the server's `lease_max` (a setting, checked by the server).
    LeaseSeconds(u64), min = 1, max = u64::MAX / 1_000, unit = " s"; setting
);
bounded_integer!(
    /// How long a long poll waits for an event, in seconds (0: it does not wait); at most the
    /// server's `long_poll_wait_max` (a setting, checked by the server).
    WaitSeconds(u32), min = 0, max = u32::MAX, unit = " s"; setting
);
bounded_integer!(
    /// How long a stream ticket lasts, in seconds; at most the server's `stream_ticket_ttl` (a
    /// setting, checked by the server).
    StreamTicketSeconds(u64), min = 1, max = CREDENTIAL_TTL_SECONDS_MAX, unit = " s"; setting
);
bounded_integer!(
    /// How long a stream cookie lasts, in seconds; at most the server's access-token lifetime
    /// (a setting, checked by the server).
    StreamCookieSeconds(u64), min = 1, max = CREDENTIAL_TTL_SECONDS_MAX, unit = " s"; setting
);
bounded_integer!(
    /// Delivery attempts before an event is dead-lettered.
    MaxAttempts(u32), min = 1, max = DELIVERY_ATTEMPTS_MAX, unit = ""
);
bounded_integer!(
    /// Most deliveries per minute to a callback.
    RatePerMinute(u32), min = 1, max = CALLBACK_RATE_PER_MINUTE_MAX, unit = ""
);
bounded_integer!(
    /// How long a callback's receiver should remember nonces, in seconds.
    ReplayWindowSeconds(u32), min = REPLAY_WINDOW_SECONDS_MIN, max = REPLAY_WINDOW_SECONDS_MAX, unit = " s"
);
bounded_integer!(
    /// How long a rotated callback secret keeps signing beside the new one, in seconds.
    SecretOverlapSeconds(u64), min = 0, max = SECRET_OVERLAP_SECONDS_MAX, unit = " s"
);
bounded_integer!(
    /// How long a retired agent key keeps verifying, in seconds (0: it is retired now).
    KeyRetireAfterSeconds(u64), min = 0, max = KEY_RETIRE_AFTER_SECONDS_MAX, unit = " s", default = 0
);
bounded_integer!(
    /// How far back the operators' activity view reaches, in minutes.
    ActivityMinutes(u32), min = 1, max = ACTIVITY_MINUTES_MAX, unit = " minutes"
);

bounded_integer!(
    /// The most events of a tenant not yet acknowledged or parked (0: no limit).
    PendingEventsMax(u64), min = 0, max = TENANT_PENDING_EVENTS_MAX, unit = ""
);
bounded_integer!(
    /// The most inline payload bytes a tenant's pending events may hold (0: no limit).
    StoredBytesMax(u64), min = 0, max = TENANT_STORED_BYTES_MAX, unit = " bytes"
);

bounded_list!(
    /// The events a batch names (a claim, an operator's requeue, purge or quarantine), each
    /// once.
    #[derive(Debug, Clone, PartialEq, Eq)]
    EventIds(crate::EventId), min = 1, max = BATCH_EVENTS_MAX as usize, distinct
);
bounded_list!(
    /// The agents one publish reaches, or a room gains.
    #[derive(Debug, Clone, PartialEq, Eq)]
    Recipients(crate::RecipientId), min = 1, max = FANOUT_RECIPIENTS_MAX
);
bounded_list!(
    /// A new room's members (none yet is fine).
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    RoomMembers(crate::RecipientId), min = 0, max = FANOUT_RECIPIENTS_MAX
);

/// Refuses a list of `len` items outside `min..=max`.
#[doc(hidden)]
pub fn check_list_len(len: usize, min: usize, max: usize) -> Result<(), LimitError> {
    if !(min..=max).contains(&len) {
        let holds =
            if len > max { format!("holds more than {max} items") } else { format!("holds {len} items") };
        return Err(LimitError(format!("{holds}; send between {min} and {max}")));
    }
    Ok(())
}

/// Refuses a list that names an item twice: its outcomes would be ambiguous.
#[doc(hidden)]
pub fn check_distinct<T: PartialEq + fmt::Display>(items: &[T]) -> Result<(), LimitError> {
    match items.iter().enumerate().find_map(|(i, item)| repeated(&items[..i], item)) {
        Some(refused) => Err(LimitError(refused)),
        None => Ok(()),
    }
}

/// Why `item` may not follow `before` in a distinct list: it is named again.
#[doc(hidden)]
pub fn repeated<T: PartialEq + fmt::Display>(before: &[T], item: &T) -> Option<String> {
    before.contains(item).then(|| format!("names {item} again; name each once"))
}

/// A list of at most `max` items, read item by item and refused at the first past `max`;
/// an item `check` refuses (given the items before it) is refused where it is
/// (`event_ids[1]`).
#[doc(hidden)]
pub fn deserialize_list<'de, D, T, F>(
    deserializer: D,
    min: usize,
    max: usize,
    check: F,
) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
    F: Fn(&[T], &T) -> Option<String> + Copy,
{
    struct Items<T, F> {
        min: usize,
        max: usize,
        check: F,
        item: PhantomData<T>,
    }
    /// One item, checked against the items before it.
    struct Item<'a, T, F> {
        before: &'a [T],
        check: F,
    }
    impl<'de, T: serde::Deserialize<'de>, F: Fn(&[T], &T) -> Option<String>> DeserializeSeed<'de>
        for Item<'_, T, F>
    {
        type Value = T;
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
            let item = T::deserialize(deserializer)?;
            match (self.check)(self.before, &item) {
                Some(refused) => Err(de::Error::custom(refused)),
                None => Ok(item),
            }
        }
    }
    impl<'de, T: serde::Deserialize<'de>, F: Fn(&[T], &T) -> Option<String> + Copy> Visitor<'de> for Items<T, F> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a list of {} to {} items", self.min, self.max)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items: Vec<T> = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max));
            while let Some(item) = seq.next_element_seed(Item { before: &items, check: self.check })? {
                if items.len() == self.max {
                    let refused = check_list_len(self.max + 1, self.min, self.max).unwrap_err();
                    return Err(de::Error::custom(refused.0));
                }
                items.push(item);
            }
            check_list_len(items.len(), self.min, self.max).map_err(|e| de::Error::custom(e.0))?;
            Ok(items)
        }
    }
    deserializer.deserialize_seq(Items { min, max, check, item: PhantomData })
}

/// A whole number's JSON Schema: its bounds, and its width as `format`.
#[cfg(feature = "openapi")]
fn integer_schema(
    repr: &str,
    min: u64,
    max: Option<u64>,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{KnownFormat, SchemaFormat, Type};
    let format = if repr == "u32" { KnownFormat::Int32 } else { KnownFormat::Int64 };
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(format)))
        .minimum(Some(min))
        .maximum(max)
        .into()
}

/// Free text's JSON Schema: no control characters (C0, DEL, C1). The limit is in bytes of
/// UTF-8, which JSON Schema cannot state: `maxLength` is the same number, in characters (exact
/// for ASCII).
#[cfg(feature = "openapi")]
fn text_schema(min: usize, max: usize) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    let pattern = if min == 0 {
        "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    } else {
        "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"
    };
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .min_length((min > 0).then_some(min))
        .max_length(Some(max))
        .pattern(Some(pattern))
        .into()
}

/// A list's JSON Schema: its items (by reference), its bounds and whether they are distinct.
#[cfg(feature = "openapi")]
#[doc(hidden)]
pub fn list_schema(
    item: &str,
    min: usize,
    max: usize,
    distinct: bool,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::{Ref, RefOr, schema::ArrayBuilder};
    ArrayBuilder::new()
        .items(RefOr::<utoipa::openapi::schema::Schema>::Ref(Ref::from_schema_name(item)))
        .min_items((min > 0).then_some(min))
        .max_items(Some(max))
        .unique_items(distinct)
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_refuse_what_is_out_of_bounds_naming_the_bounds() {
        assert_eq!(RetryAfterSeconds::new(604_800).unwrap().get(), 604_800);
        assert_eq!(
            RetryAfterSeconds::new(604_801).unwrap_err().0,
            "is 604801 s; send between 0 and 604800 s"
        );
        assert_eq!(RetryAfterSeconds::saturating(u64::MAX).get(), RETRY_AFTER_SECONDS_MAX);
        assert!(BatchLimit::new(0).is_err());
        assert!(LeaseSeconds::new(0).is_err());
        let err = serde_json::from_str::<BatchLimit>("501").unwrap_err().to_string();
        assert!(err.starts_with("is 501; send between 1 and 500"), "{err}");
    }

    #[test]
    fn text_is_one_line_of_bounded_bytes() {
        assert!(Reason::new("").is_err());
        assert!(ReleaseReason::new("").is_ok());
        assert!(Reason::new("x".repeat(REASON_BYTES_MAX)).is_ok());
        assert_eq!(
            Reason::new("x".repeat(REASON_BYTES_MAX + 1)).unwrap_err().0,
            "is 201 bytes; give 1 to 200 bytes saying why"
        );
        assert!(Reason::new("two\nlines").unwrap_err().0.contains("one line"));
        assert!(Reason::new("caf\u{e9} \u{85}").is_err(), "C1 controls are refused too");
    }

    #[test]
    fn lists_stop_reading_at_one_past_their_bound() {
        assert_eq!(serde_json::from_str::<Recipients>("[\"a\", \"b\"]").unwrap().len(), 2);
        let many: Vec<String> = (0..=FANOUT_RECIPIENTS_MAX).map(|i| format!("\"a{i}\"")).collect();
        let err = serde_json::from_str::<Recipients>(&format!("[{}]", many.join(","))).unwrap_err();
        assert!(err.to_string().starts_with("holds more than 1000 items; send between 1 and 1000"), "{err}");
        assert!(
            serde_json::from_str::<Recipients>("[]").unwrap_err().to_string().starts_with("holds 0 items")
        );
        assert!(serde_json::from_str::<RoomMembers>("[]").is_ok());
        let id = "\"0197f0ab-44f7-7f1a-b0ef-1f5d0f9a1c70\"";
        let err = serde_json::from_str::<EventIds>(&format!("[{id},{id}]")).unwrap_err().to_string();
        assert!(err.starts_with("names 0197f0ab-44f7-7f1a-b0ef-1f5d0f9a1c70 again"), "{err}");
    }
}
