//! What a setting is: its names, its form, its bounds and its help. Each setting is declared
//! once, in [`super::sections`], through [`settings!`], which makes the section structs,
//! their defaults and [`SETTINGS`](super::SETTINGS) from the same lines; loading, the
//! checks, `serve`'s flags and the README's table of settings all read that table.

use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

use super::forms::{Form, SettingValue, Value, format_duration};
use super::{Config, ENV_PREFIX, SETTINGS};

/// One setting of the table.
#[derive(Debug)]
pub struct Setting {
    /// Its section of the file (`inbox`) and its name there (`lease_default`).
    pub section: &'static str,
    pub key: &'static str,
    /// Its flat name: also a top-level key of the file, its environment variable after
    /// `AGENT_INBOX_` in capitals, and its flag when it has one (`--lease-default`). The key
    /// unless the declaration says otherwise.
    pub flat: &'static str,
    /// How it is written, for people (`--help`, the README).
    pub form: Form,
    /// Whether `agent-inbox serve` has a flag for it.
    pub flag: bool,
    /// What a value must keep; checked when the configuration loads.
    pub bounds: &'static [Bound],
    /// Why, when the sentence refusing a value should say: ends that sentence after a colon.
    pub why: &'static str,
    /// The declaration's doc comment: its first paragraph is the one-line help.
    pub docs: &'static [&'static str],
    /// The form of its Rust type, which [`Self::form`] may only narrow (a count to bytes).
    pub(super) typed: Form,
    /// Its value in a configuration.
    pub(super) value: fn(&Config) -> Value,
}

/// What a setting's value must keep.
#[derive(Debug)]
pub enum Bound {
    AtLeast(Limit),
    AtMost(Limit),
    /// Strictly more (longer) than.
    Above(Limit),
    /// Set together with the named setting, or both left unset.
    With(&'static str),
    /// A rule about the value that is not a number: what it asks (for `--help` and the README)
    /// and the check, whose refusal is the whole sentence.
    Rule(&'static str, fn(&Value) -> Result<(), String>),
}

/// One side of a bound: a value of the setting's own kind, or another setting's value.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    Duration(Duration),
    Count(u64),
    Setting(&'static str),
}

pub const fn ms(n: u64) -> Limit {
    Limit::Duration(Duration::from_millis(n))
}

pub const fn secs(n: u64) -> Limit {
    Limit::Duration(Duration::from_secs(n))
}

pub const fn days(n: u64) -> Limit {
    Limit::Duration(Duration::from_secs(n * 86_400))
}

pub const fn count(n: u64) -> Limit {
    Limit::Count(n)
}

pub const fn setting(flat: &'static str) -> Limit {
    Limit::Setting(flat)
}

/// At least `low` and at most `high`.
pub const fn between(low: Limit, high: Limit) -> [Bound; 2] {
    [Bound::AtLeast(low), Bound::AtMost(high)]
}

/// Declares the sections and every setting once: the [`Config`] struct, one struct per
/// section with its defaults, and [`SETTINGS`](super::SETTINGS), one row per field. A
/// setting is `key: Type = default` then `name: value` pairs of [`Setting`] (`flat`, `form`,
/// `flag`, `bounds`, `why`), after its doc comment, whose first paragraph is its help.
macro_rules! settings {
    ($(
        $(#[doc = $section_doc:literal])*
        [$section:ident] $Section:ident {
            $(
                $(#[doc = $doc:literal])*
                $key:ident: $ty:ty = $default:expr $(, $name:ident: $value:expr)* ;
            )*
        }
    )*) => {
        /// The whole configuration of a node, one section per subsystem.
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Config {
            $(pub $section: $Section,)*
        }

        $(
            $(#[doc = $section_doc])*
            #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
            #[serde(default, deny_unknown_fields)]
            pub struct $Section {
                $(
                    $(#[doc = $doc])*
                    #[serde(with = "crate::config::forms::setting")]
                    pub $key: $ty,
                )*
            }

            impl Default for $Section {
                fn default() -> Self {
                    Self { $($key: $default,)* }
                }
            }
        )*

        /// Every setting, section by section.
        pub static SETTINGS: &[$crate::config::Setting] = &[$($(
            $crate::config::Setting {
                docs: &[$($doc),*],
                value: |config| $crate::config::forms::SettingValue::value(&config.$section.$key),
                $($name: $value,)*
                ..$crate::config::Setting::of::<$ty>(stringify!($section), stringify!($key))
            },
        )*)*];
    };
}

pub(super) use settings;

impl Setting {
    /// A setting of type `T` with nothing but its place declared: no flag, no bounds.
    pub(super) const fn of<T: SettingValue>(section: &'static str, key: &'static str) -> Setting {
        Setting {
            section,
            key,
            flat: key,
            form: T::FORM,
            flag: false,
            bounds: &[],
            why: "",
            docs: &[],
            typed: T::FORM,
            value: unset,
        }
    }

    /// `AGENT_INBOX_` and the flat name in capitals.
    pub fn env(&self) -> String {
        format!("{ENV_PREFIX}{}", self.flat.to_uppercase())
    }

    /// `lease-default` for `--lease-default`, if `serve` has a flag for it.
    pub fn flag_name(&self) -> Option<String> {
        self.flag.then(|| self.flat.replace('_', "-"))
    }

    /// The first paragraph of its doc comment, in one line, without a final period.
    pub fn help(&self) -> String {
        let paragraph: Vec<&str> =
            self.docs.iter().map(|line| line.trim()).take_while(|line| !line.is_empty()).collect();
        paragraph.join(" ").trim_end_matches('.').to_owned()
    }

    /// The rest of its doc comment, paragraphs apart.
    pub fn details(&self) -> String {
        let rest: Vec<&str> =
            self.docs.iter().map(|line| line.trim()).skip_while(|line| !line.is_empty()).collect();
        let paragraphs: Vec<String> =
            rest.split(|line| line.is_empty()).filter(|p| !p.is_empty()).map(|p| p.join(" ")).collect();
        paragraphs.join("\n\n")
    }

    /// Text from the environment or a flag as the TOML value its type reads.
    pub fn read_text(&self, text: &str) -> toml::Value {
        self.typed.read_text(text)
    }

    /// Whether `text` can be this setting's (a number for a count, a duration for a
    /// duration), for a flag to refuse it early in the form's words.
    pub fn check_text(&self, text: &str) -> Result<(), String> {
        self.typed.check_text(text)
    }

    pub fn value(&self, config: &Config) -> Value {
        (self.value)(config)
    }

    pub fn default_value(&self) -> Value {
        self.value(&Config::default())
    }

    /// The bounds in words (`between 1s and lease_max`); with a configuration, each other
    /// setting named with its value there (`lease_max (1h)`).
    pub fn bounds_text(&self, config: Option<&Config>) -> String {
        let limit = |limit: &Limit| match (limit, config) {
            (Limit::Setting(flat), Some(config)) => format!("{flat} ({})", lookup(flat).value(config)),
            (limit, _) => limit.to_string(),
        };
        let more = if self.form == Form::Duration { "longer than" } else { "more than" };
        let low = self.bounds.iter().find_map(|b| if let Bound::AtLeast(l) = b { Some(l) } else { None });
        let high = self.bounds.iter().find_map(|b| if let Bound::AtMost(l) = b { Some(l) } else { None });
        let mut phrases = Vec::new();
        match (low, high) {
            (Some(low), Some(high)) => phrases.push(format!("between {} and {}", limit(low), limit(high))),
            (Some(low), None) => phrases.push(format!("at least {}", limit(low))),
            (None, Some(high)) => phrases.push(format!("at most {}", limit(high))),
            (None, None) => {}
        }
        for bound in self.bounds {
            match bound {
                Bound::AtLeast(_) | Bound::AtMost(_) => {}
                Bound::Above(other) => phrases.push(format!("{more} {}", limit(other))),
                Bound::With(other) => phrases.push(format!("set with {other}")),
                Bound::Rule(asks, _) => phrases.push((*asks).to_owned()),
            }
        }
        phrases.join(" and ")
    }
}

fn unset(_: &Config) -> Value {
    Value::Unset
}

/// The setting a bound names; every name a bound uses is checked by a test.
pub(super) fn lookup(flat: &str) -> &'static Setting {
    SETTINGS.iter().find(|s| s.flat == flat).unwrap_or_else(|| panic!("a bound names {flat:?}, no setting"))
}

impl Form {
    /// What `--help` puts after the flag: `--lease-default <DURATION>`.
    pub fn placeholder(self) -> &'static str {
        match self {
            Form::Duration => "DURATION",
            Form::Count => "N",
            Form::Bytes => "BYTES",
            Form::Bool => "true|false",
            Form::Text => "TEXT",
            Form::Url => "URL",
            Form::Address => "HOST:PORT",
            Form::Path => "FILE",
            Form::List => "LIST",
        }
    }

    /// How the README names it.
    pub fn name(self) -> &'static str {
        match self {
            Form::Duration => "duration",
            Form::Count => "count",
            Form::Bytes => "bytes",
            Form::Bool => "true or false",
            Form::Text => "text",
            Form::Url => "URL",
            Form::Address => "host:port",
            Form::Path => "file",
            Form::List => "list",
        }
    }

    /// The form it is read as: bytes are a count, and URLs, addresses and paths are text.
    pub fn reads(self) -> Form {
        match self {
            Form::Bytes => Form::Count,
            Form::Url | Form::Address | Form::Path => Form::Text,
            form => form,
        }
    }

    fn read_text(self, text: &str) -> toml::Value {
        let number = || text.parse::<i64>().ok().map(toml::Value::Integer);
        let value = match self.reads() {
            Form::Duration | Form::Count => number(),
            Form::Bool => text.parse::<bool>().ok().map(toml::Value::Boolean),
            _ => None,
        };
        value.unwrap_or_else(|| toml::Value::String(text.to_owned()))
    }

    fn check_text(self, text: &str) -> Result<(), String> {
        match self.reads() {
            Form::Duration => crate::config::parse_duration(text).map(|_| ()),
            Form::Count => {
                text.parse::<u64>().map(|_| ()).map_err(|_| format!("{text:?} is not a whole number"))
            }
            Form::Bool => {
                text.parse::<bool>().map(|_| ()).map_err(|_| format!("{text:?} is not true or false"))
            }
            _ => Ok(()),
        }
    }
}

impl Value {
    pub fn is_set(&self) -> bool {
        *self != Value::Unset
    }

    /// How this value stands to `other` of the same kind; none across kinds or when unset.
    pub(super) fn compare(&self, other: &Value) -> Option<Ordering> {
        match (self, other) {
            (Value::Duration(a), Value::Duration(b)) => Some(a.cmp(b)),
            (Value::Count(a), Value::Count(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unset => f.write_str("unset"),
            Value::Duration(duration) => f.write_str(&format_duration(*duration)),
            Value::Count(n) => write!(f, "{n}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Text(text) => f.write_str(text),
            Value::List(list) if list.is_empty() => f.write_str("none"),
            Value::List(list) => f.write_str(&list.join(",")),
        }
    }
}

impl Limit {
    /// Its value in `config`.
    pub(super) fn value(&self, config: &Config) -> Value {
        match self {
            Limit::Duration(duration) => Value::Duration(*duration),
            Limit::Count(n) => Value::Count(*n),
            Limit::Setting(flat) => lookup(flat).value(config),
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Duration(duration) => f.write_str(&format_duration(*duration)),
            Limit::Count(n) => write!(f, "{n}"),
            Limit::Setting(flat) => f.write_str(flat),
        }
    }
}

/// The README's table of every setting (between its markers), made from [`SETTINGS`].
pub fn markdown_table() -> String {
    let mut table = String::from(
        "| `[section] key` | flat key | environment | flag | form | default | bounds | what it is |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let code = |text: &str| if text.is_empty() { String::new() } else { format!("`{text}`") };
    for s in SETTINGS {
        let default = match s.default_value() {
            Value::Unset => "unset".to_owned(),
            Value::List(list) if list.is_empty() => "none".to_owned(),
            value => code(&value.to_string()),
        };
        let flag = s.flag_name().map(|name| code(&format!("--{name}"))).unwrap_or_default();
        let cells = [
            code(&format!("[{}] {}", s.section, s.key)),
            code(s.flat),
            code(&s.env()),
            flag,
            s.form.name().to_owned(),
            default,
            s.bounds_text(None),
            s.help(),
        ];
        let cells: Vec<String> = cells.iter().map(|cell| cell.replace('|', "\\|")).collect();
        table.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    table
}
