//! How settings are written and read: durations in human forms (`90s`, `15m`, or seconds),
//! lists as a TOML array or comma-separated text (the environment, flags). Each Rust type a
//! setting may have says here, once, its [`Form`], how it reads from the file and how it shows.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How a setting is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `90s`, `15m`, `30d`, or a number of seconds.
    Duration,
    Count,
    /// A count of bytes.
    Bytes,
    Bool,
    Text,
    Url,
    /// A socket address, `host:port`.
    Address,
    Path,
    /// A TOML array, or comma-separated text in the environment and flags.
    List,
}

/// A setting's value, whatever its Rust type, as bounds compare it and people read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Unset,
    Duration(Duration),
    Count(u64),
    Bool(bool),
    Text(String),
    List(Vec<String>),
}

/// A type a setting may have: how it is written, read and shown.
pub trait SettingValue: Sized {
    /// How it is written, unless the setting names a narrower form of the same reading.
    const FORM: Form;
    fn value(&self) -> Value;
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error>;
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error>;
}

/// The `#[serde(with)]` of every setting, through [`SettingValue`].
pub mod setting {
    use serde::{Deserializer, Serializer};

    use super::SettingValue;

    pub fn serialize<T: SettingValue, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
        value.write(serializer)
    }

    pub fn deserialize<'de, T: SettingValue, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
        T::read(deserializer)
    }
}

impl SettingValue for Duration {
    const FORM: Form = Form::Duration;
    fn value(&self) -> Value {
        Value::Duration(*self)
    }
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_duration(*self))
    }
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Seconds(u64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Seconds(seconds) => Ok(Duration::from_secs(seconds)),
            Raw::Text(text) => crate::config::parse_duration(&text).map_err(serde::de::Error::custom),
        }
    }
}

/// A duration that may be left unset.
impl SettingValue for Option<Duration> {
    const FORM: Form = Form::Duration;
    fn value(&self) -> Value {
        self.map_or(Value::Unset, Value::Duration)
    }
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Some(value) => value.write(serializer),
            None => serializer.serialize_none(),
        }
    }
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Duration::read(deserializer).map(Some)
    }
}

/// A list of strings: a TOML array, or comma-separated text from the environment or a flag.
impl SettingValue for Vec<String> {
    const FORM: Form = Form::List;
    fn value(&self) -> Value {
        Value::List(self.clone())
    }
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.serialize(serializer)
    }
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            List(Vec<String>),
            Text(String),
        }
        Ok(match Raw::deserialize(deserializer)? {
            Raw::List(list) => list,
            Raw::Text(text) => {
                text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
            }
        })
    }
}

/// Types whose file form is serde's own: only their form and how they show are said here.
macro_rules! plain {
    ($($ty:ty => $form:expr, |$v:ident| $value:expr;)*) => {$(
        impl SettingValue for $ty {
            const FORM: Form = $form;
            fn value(&self) -> Value {
                let $v = self;
                $value
            }
            fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.serialize(serializer)
            }
            fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <$ty>::deserialize(deserializer)
            }
        }
    )*};
}

plain! {
    u32 => Form::Count, |n| Value::Count(u64::from(*n));
    usize => Form::Count, |n| Value::Count(*n as u64);
    bool => Form::Bool, |b| Value::Bool(*b);
    String => Form::Text, |text| Value::Text(text.clone());
    Option<String> => Form::Text, |text| text.clone().map_or(Value::Unset, Value::Text);
    Option<PathBuf> => Form::Path, |path| {
        path.as_ref().map_or(Value::Unset, |path| Value::Text(path.display().to_string()))
    };
}

/// A duration in the largest unit that divides it (`90s`, `15m`, `30d`, `250ms`), which every
/// duration setting reads back.
pub fn format_duration(duration: Duration) -> String {
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    let (size, unit) = UNITS.iter().find(|(size, _)| nanos % size == 0).expect("one nanosecond divides all");
    format!("{}{unit}", nanos / size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_show_in_the_largest_unit_that_divides_them_and_read_back() {
        for (duration, shown) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(900), "15m"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(30 * 86_400), "30d"),
            (Duration::from_micros(1_500), "1500us"),
        ] {
            assert_eq!(format_duration(duration), shown);
            assert_eq!(crate::config::parse_duration(shown), Ok(duration), "{shown}");
        }
    }
}
