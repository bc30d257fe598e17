//! How settings are written: durations in human forms (`90s`, `15m`, or seconds), lists as a
//! TOML array or comma-separated text (the environment, flags).

/// A list of strings: a TOML array, or comma-separated text from the environment or a flag.
pub mod string_list {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(value: &[String], serializer: S) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
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

/// A duration that may be left unset.
pub mod optional_human_duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => super::human_duration::serialize(value, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        super::human_duration::deserialize(deserializer).map(Some)
    }
}

pub mod human_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
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
