//! Service configuration: built-in defaults, overridden by a TOML file, overridden by
//! `AGENT_INBOX_*` environment variables, overridden by command-line flags. Durations take
//! human forms (`90s`, `15m`, `30d`); every limit has a bound ([`check`]).
//!
//! Settings live in sections, one per subsystem (`[database] url`, `[inbox] lease_default`,
//! `[callbacks] timeout`, ...; [`sections`]). Every setting also keeps the flat name it had
//! before the sections (`database_url`, `lease_default`, `callbacks_timeout`): a file may use
//! either form (not both for one setting), and every setting's environment variable uses the
//! flat name (`AGENT_INBOX_DATABASE_URL`). Only a subset of the settings has a flag
//! (`agent-inbox serve --help` lists them, `--database-url` among them), named after the flat
//! name too; the rest are set in the file or the environment.
//!
//! [`SETTINGS`] is the one table of them all (declared in [`sections`]): names, form,
//! default, bounds, flag and help; the loader, the checks, `serve`'s flags and the README's
//! table of settings ([`markdown_table`]) read it, so none has a list of its own.

mod check;
mod forms;
pub mod sections;
mod setting;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub use forms::{Form, Value};
pub use sections::{
    CallbacksConfig, Config, DatabaseConfig, HttpConfig, InboxConfig, LimitsConfig, SETTINGS, SecretsConfig,
    SessionsConfig, SignalsConfig, SignaturesConfig, TlsConfig, TokensConfig,
};
pub use setting::{Bound, Limit, Setting, markdown_table};

/// Prefix of the environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "AGENT_INBOX_";

/// A configuration that cannot be used, with what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// The setting given by its flat name or as `section.name`.
fn lookup(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|setting| {
        setting.flat == key
            || key.split_once('.').is_some_and(|(s, n)| s == setting.section && n == setting.key)
    })
}

/// Every accepted name, for the message that refuses an unknown one.
fn known_keys() -> String {
    let mut known: Vec<&str> = SETTINGS.iter().map(|setting| setting.flat).collect();
    known.sort();
    known.join(", ")
}

/// The layers merged so far: section name, then setting name, then value.
#[derive(Debug, Default)]
struct Layers(BTreeMap<&'static str, toml::Table>);

impl Layers {
    fn set(&mut self, setting: &'static Setting, value: toml::Value) {
        self.0.entry(setting.section).or_default().insert(setting.key.to_owned(), value);
    }
}

impl Config {
    /// Layers defaults, the TOML file (if any), `AGENT_INBOX_*` variables from `env`, then
    /// `flags` (key, value) pairs, and checks the result.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut layers = Layers::default();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
            let from_file: toml::Table = text
                .parse()
                .map_err(|e| ConfigError(format!("config file {} is not valid TOML: {e}", path.display())))?;
            file_layer(&mut layers, from_file)
                .map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))?;
        }
        let env: BTreeMap<String, String> =
            env.into_iter().filter(|(k, _)| k.starts_with(ENV_PREFIX)).collect();
        for setting in SETTINGS {
            if let Some(value) = env.get(&setting.env()) {
                layers.set(setting, setting.read_text(value));
            }
        }
        for (key, value) in flags {
            let Some(setting) = lookup(&key) else {
                return Err(ConfigError(format!("unknown setting {key:?}; known keys: {}", known_keys())));
            };
            layers.set(setting, setting.read_text(&value));
        }
        let mut table = toml::Table::try_from(Config::default()).map_err(|e| ConfigError(e.to_string()))?;
        for (section, values) in layers.0 {
            let entry = table.entry(section).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let toml::Value::Table(entry) = entry else { unreachable!("every section is a table") };
            entry.extend(values);
        }
        let config: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError(format!("invalid configuration: {}", e.message())))?;
        config.check()?;
        Ok(config)
    }
}

/// A file's settings: `[section]` tables and flat keys alike; one setting given twice (flat
/// and in its section) is refused rather than one silently winning.
fn file_layer(layers: &mut Layers, from_file: toml::Table) -> Result<(), String> {
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    let mut put = |layers: &mut Layers, written: String, value: toml::Value| {
        let Some(setting) = lookup(&written) else {
            return Err(format!("unknown key {written:?}; known keys: {}", known_keys()));
        };
        if let Some(first) = seen.insert(setting.flat, written.clone()) {
            return Err(format!("{first} and {written} are the same setting; keep one"));
        }
        layers.set(setting, value);
        Ok(())
    };
    for (key, value) in from_file {
        match value {
            toml::Value::Table(values) if SETTINGS.iter().any(|setting| setting.section == key) => {
                for (name, value) in values {
                    put(layers, format!("{key}.{name}"), value)?;
                }
            }
            value => put(layers, key, value)?,
        }
    }
    Ok(())
}

/// `AGENT_INBOX_*` variables that belong to the clients, the tests or a handler's
/// environment, not to the server: never warned about.
const CLIENT_VARIABLES: &[&str] = &[
    "BENCH_MYSQL_URL",
    "BIN",
    "CONFIG",
    "DAEMON_SOCKET",
    "DELIVERY_ATTEMPT",
    "HOME",
    "INBOX_SEQ",
    "LOG",
    "LOG_JSON",
    "PROFILE",
    "REFRESH_TOKEN",
    "SECRET_STORE",
    "SERVER",
    "STATE",
    "TEST_MYSQL_URL",
    "TOKEN",
    "URL",
];

/// A warning for each `AGENT_INBOX_*` variable that names no setting (a typo is otherwise
/// silently ignored, unlike in the TOML file), with the closest setting's variable.
pub fn unknown_environment(env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let known: Vec<&str> = SETTINGS.iter().map(|setting| setting.flat).collect();
    let mut warnings: Vec<String> = env
        .into_iter()
        .filter_map(|(name, _)| {
            let key = name.strip_prefix(ENV_PREFIX)?.to_owned();
            let setting = key.to_lowercase();
            if known.contains(&setting.as_str())
                || CLIENT_VARIABLES.contains(&key.as_str())
                || key.starts_with("EVENT_")
            {
                return None;
            }
            let closest = known.iter().min_by_key(|k| edit_distance(k, &setting))?;
            Some(format!(
                "{name} is not a setting and is ignored; did you mean {ENV_PREFIX}{}?",
                closest.to_uppercase()
            ))
        })
        .collect();
    warnings.sort();
    warnings
}

/// Levenshtein distance, for suggesting the setting a misspelt name meant.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// A duration as settings and flags take it: `90s`, `15m`, `30d`, or a bare number of
/// seconds (`90`), the same on the server and in the clients.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    // A bare decimal is seconds too ("1.5"); digits and one point only, so neither "inf",
    // "-1" nor "1e3" passes for a number of seconds.
    let decimal = text.trim();
    if decimal.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && let Some(duration) = decimal.parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok())
    {
        return Ok(duration);
    }
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{text:?} is not a duration such as 90s, 15m or 30d (or a number of seconds) ({e})")
    })
}

/// `database_url` with any password replaced by `***`, for banners, logs and problems.
pub fn redact_database_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((credentials, host)) = rest.rsplit_once('@') else { return url.to_owned() };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// The password in `database_url`, if it has one, so text that may quote it can be redacted.
pub fn database_password(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let (credentials, _) = rest.rsplit_once('@')?;
    credentials.split_once(':').map(|(_, password)| password).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn unknown_environment_variables_are_warned_with_the_closest_setting() {
        let warnings = unknown_environment(env(&[
            ("AGENT_INBOX_LEASE_DEFALT", "5m"),
            ("AGENT_INBOX_LEASE_DEFAULT", "5m"),
            ("AGENT_INBOX_TRUSTED_PROXIES", "10.0.0.0/8"),
            ("AGENT_INBOX_JWKS_FILE", "/etc/jwks.json"),
            ("AGENT_INBOX_TOKEN", "t"),
            ("AGENT_INBOX_EVENT_ID", "e"),
            ("AGENT_INBOX_TEST_MYSQL_URL", "mysql://"),
            ("AGENT_INBOX_LOG_JSON", "1"),
            ("PATH", "/bin"),
        ]));
        assert_eq!(
            warnings,
            [
                "AGENT_INBOX_LEASE_DEFALT is not a setting and is ignored; did you mean AGENT_INBOX_LEASE_DEFAULT?"
            ]
        );
    }

    #[test]
    fn bare_numbers_are_seconds_in_every_source() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1_500));
        assert_eq!(parse_duration(" 0.25 ").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1_500));
        for not_seconds in ["-1", "inf", "NaN", "1e3", ".", "1.2.3", ""] {
            assert!(parse_duration(not_seconds).is_err(), "{not_seconds:?}");
        }
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert!(parse_duration("soon").unwrap_err().contains("number of seconds"));
        let dir = std::env::temp_dir().join(format!("agent-inbox-config-seconds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::fs::write(&file, "lease_default = \"90\"\nretention = 3600\n").unwrap();
        let config = Config::load(Some(&file), env(&[("AGENT_INBOX_LEASE_MAX", "7200")]), []).unwrap();
        assert_eq!(config.inbox.lease_default, Duration::from_secs(90));
        assert_eq!(config.inbox.retention, Duration::from_secs(3600));
        assert_eq!(config.inbox.lease_max, Duration::from_secs(7200));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_then_environment_then_flags() {
        let dir = std::env::temp_dir().join(format!("agent-inbox-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::fs::write(&file, "listen = \"0.0.0.0:9000\"\nretention = \"7d\"\nlease_default = \"90s\"\n")
            .unwrap();
        let config = Config::load(
            Some(&file),
            env(&[
                ("AGENT_INBOX_LISTEN", "127.0.0.1:7000"),
                ("AGENT_INBOX_MAX_ATTEMPTS", "3"),
                ("HOME", "/x"),
            ]),
            env(&[("lease_default", "15m")]),
        )
        .unwrap();
        assert_eq!(config.http.listen, "127.0.0.1:7000", "environment beats the file");
        assert_eq!(config.inbox.retention, Duration::from_secs(7 * 86_400), "the file beats defaults");
        assert_eq!(config.inbox.lease_default, Duration::from_secs(900), "flags beat everything");
        assert_eq!(config.inbox.max_attempts, 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn mistakes_are_named() {
        let err = Config::load(None, env(&[("AGENT_INBOX_RETENTION", "soon")]), []).unwrap_err();
        assert!(err.to_string().contains("\"soon\" is not a duration"), "{err}");
        let err = Config::load(None, [], env(&[("lease_defualt", "1m")])).unwrap_err();
        assert!(err.to_string().contains("unknown setting \"lease_defualt\""), "{err}");
        let err = Config::load(None, [], env(&[("lease_default", "2h")])).unwrap_err();
        assert!(err.to_string().contains("lease_default must be"), "{err}");
        let err = Config::load(None, [], env(&[("tls_cert", "/x/cert.pem")])).unwrap_err();
        assert!(err.to_string().contains("tls_cert and tls_key go together"), "{err}");
        let err = Config::load(None, [], env(&[("cors_origins", "https://app.example.com/")])).unwrap_err();
        assert!(err.to_string().contains("no path, query or trailing slash"), "{err}");
        let err = Config::load(None, [], env(&[("cors_origins", "*")])).unwrap_err();
        assert!(err.to_string().contains("wildcard"), "{err}");
    }

    #[test]
    fn passwords_are_redacted() {
        let url = "mysql://inbox:s3cr:et@db.internal:3306/agent_inbox";
        assert_eq!(redact_database_url(url), "mysql://inbox:***@db.internal:3306/agent_inbox");
        assert_eq!(database_password(url), Some("s3cr:et"));
        assert_eq!(redact_database_url("mysql://root@127.0.0.1/x"), "mysql://root@127.0.0.1/x");
        assert_eq!(database_password("mysql://root@127.0.0.1/x"), None);
        assert_eq!(redact_database_url("sqlite://./data/agent-inbox.db"), "sqlite://./data/agent-inbox.db");
        let config = Config::load(None, env(&[("AGENT_INBOX_DATABASE_WAIT_MAX", "90s")]), []).unwrap();
        assert_eq!(config.database.wait_max, Some(Duration::from_secs(90)));
        assert_eq!(Config::load(None, [], []).unwrap().database.wait_max, None, "for ever by default");
    }

    #[test]
    fn lists_and_unset_settings_come_from_the_environment_too() {
        let config = Config::load(
            None,
            env(&[
                ("AGENT_INBOX_CORS_ORIGINS", "https://a.example, http://127.0.0.1:5173"),
                ("AGENT_INBOX_JWKS_ISSUER", "https://idp.example"),
                ("AGENT_INBOX_TLS_CERT", "/etc/inbox/cert.pem"),
                ("AGENT_INBOX_TLS_KEY", "/etc/inbox/key.pem"),
            ]),
            [],
        )
        .unwrap();
        assert_eq!(config.http.cors_origins, ["https://a.example", "http://127.0.0.1:5173"]);
        assert_eq!(config.tokens.jwks_issuer.as_deref(), Some("https://idp.example"));
        assert_eq!(config.tls.key.as_deref(), Some(Path::new("/etc/inbox/key.pem")));
        let dir = std::env::temp_dir().join(format!("agent-inbox-config-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::fs::write(
            &file,
            "cors_origins = [\"https://b.example\"]\nsignatures_authority = \"inbox.example\"\n",
        )
        .unwrap();
        let config = Config::load(Some(&file), [], []).unwrap();
        assert_eq!(config.http.cors_origins, ["https://b.example"]);
        assert_eq!(config.signatures.authority.as_deref(), Some("inbox.example"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An old flat file and the same settings in sections load to the same configuration, and
    /// the flat environment variables and flags still reach the sectioned fields.
    #[test]
    fn flat_keys_and_sections_load_the_same_config() {
        let dir = std::env::temp_dir().join(format!("agent-inbox-config-sections-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let flat = dir.join("flat.toml");
        std::fs::write(
            &flat,
            "listen = \"0.0.0.0:9000\"\ndatabase_url = \"mysql://inbox@db/agent_inbox\"\n\
             database_wait_max = \"2m\"\nlease_default = \"90s\"\nmax_attempts = 4\n\
             heartbeat_interval = \"20s\"\ntoken_issuer = \"coord\"\njwks_file = \"/etc/jwks.json\"\n\
             signatures_authority = \"inbox.example\"\ncallbacks_timeout = \"2s\"\n\
             callbacks_allow_hosts = [\"hooks.internal\"]\nsignal_gap_grace = \"5s\"\n\
             tls_cert = \"/etc/cert.pem\"\ntls_key = \"/etc/key.pem\"\nwaiters_per_agent = 3\n",
        )
        .unwrap();
        let sectioned = dir.join("sectioned.toml");
        std::fs::write(
            &sectioned,
            "[http]\nlisten = \"0.0.0.0:9000\"\n\
             [database]\nurl = \"mysql://inbox@db/agent_inbox\"\nwait_max = \"2m\"\n\
             [inbox]\nlease_default = \"90s\"\nmax_attempts = 4\n\
             [sessions]\nheartbeat_interval = \"20s\"\n\
             [tokens]\nissuer = \"coord\"\njwks_file = \"/etc/jwks.json\"\n\
             [signatures]\nauthority = \"inbox.example\"\n\
             [callbacks]\ntimeout = \"2s\"\nallow_hosts = [\"hooks.internal\"]\n\
             [signals]\ngap_grace = \"5s\"\n\
             [tls]\ncert = \"/etc/cert.pem\"\nkey = \"/etc/key.pem\"\n\
             [limits]\nwaiters_per_agent = 3\n",
        )
        .unwrap();
        let from_flat = Config::load(Some(&flat), [], []).unwrap();
        let from_sections = Config::load(Some(&sectioned), [], []).unwrap();
        assert_eq!(from_flat, from_sections);
        assert_ne!(from_flat, Config::default());
        assert_eq!(from_flat.database.url, "mysql://inbox@db/agent_inbox");
        assert_eq!(from_flat.callbacks.timeout, Duration::from_secs(2));
        assert_eq!(from_flat.tokens.issuer, "coord");

        let from_env = Config::load(
            Some(&sectioned),
            env(&[("AGENT_INBOX_CALLBACKS_TIMEOUT", "3s"), ("AGENT_INBOX_LEASE_DEFAULT", "2m")]),
            env(&[("signal_gap_grace", "7s"), ("inbox.max_attempts", "6")]),
        )
        .unwrap();
        assert_eq!(from_env.callbacks.timeout, Duration::from_secs(3));
        assert_eq!(from_env.inbox.lease_default, Duration::from_secs(120));
        assert_eq!(from_env.signals.gap_grace, Duration::from_secs(7));
        assert_eq!(from_env.inbox.max_attempts, 6);

        let both = dir.join("both.toml");
        std::fs::write(&both, "lease_default = \"90s\"\n[inbox]\nlease_default = \"2m\"\n").unwrap();
        let err = Config::load(Some(&both), [], []).unwrap_err();
        assert!(err.to_string().contains("are the same setting"), "{err}");
        let unknown = dir.join("unknown.toml");
        std::fs::write(&unknown, "[inbox]\nlease_defualt = \"2m\"\n").unwrap();
        let err = Config::load(Some(&unknown), [], []).unwrap_err();
        assert!(err.to_string().contains("unknown key \"inbox.lease_defualt\""), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The table's names can be told apart: one flat name per setting, one `[section] key`,
    /// and no flat name that is also a section's (a file could not tell them apart).
    #[test]
    fn every_setting_has_names_of_its_own_and_a_help_line() {
        let mut flat: Vec<&str> = SETTINGS.iter().map(|s| s.flat).collect();
        flat.sort();
        flat.dedup();
        assert_eq!(flat.len(), SETTINGS.len(), "a flat name used by two settings");
        let mut keyed: Vec<(&str, &str)> = SETTINGS.iter().map(|s| (s.section, s.key)).collect();
        keyed.sort();
        keyed.dedup();
        assert_eq!(keyed.len(), SETTINGS.len(), "a section key used by two settings");
        let sections: Vec<&str> = SETTINGS.iter().map(|s| s.section).collect();
        assert!(flat.iter().all(|flat| !sections.contains(flat)), "a flat name that is also a section's");
        for setting in SETTINGS {
            let help = setting.help();
            assert!(!help.is_empty() && !help.contains("  "), "{}: no one-line help: {help:?}", setting.flat);
            assert_eq!(
                setting.form.reads(),
                setting.typed.reads(),
                "{}: a form its type cannot read",
                setting.flat
            );
        }
    }

    /// Every bound compares a setting with a value of its own kind (or another setting of
    /// it), every setting a bound names exists, and the defaults keep every bound.
    #[test]
    fn bounds_fit_their_settings_and_the_defaults_keep_them() {
        let defaults = Config::default();
        for setting in SETTINGS {
            let own = setting.default_value();
            for bound in setting.bounds {
                let limit = match bound {
                    Bound::AtLeast(limit) | Bound::AtMost(limit) | Bound::Above(limit) => limit,
                    Bound::With(other) => {
                        assert!(SETTINGS.iter().any(|s| s.flat == *other), "{}: with {other}?", setting.flat);
                        continue;
                    }
                    Bound::Rule(..) => continue,
                };
                let kind = |value: &Value| std::mem::discriminant(value);
                let same_kind = match (&own, limit) {
                    (Value::Unset, _) => true,
                    (own, Limit::Setting(other)) => {
                        let other = SETTINGS.iter().find(|s| s.flat == *other);
                        other.is_some_and(|other| kind(&other.default_value()) == kind(own))
                    }
                    (own, limit) => kind(&limit.value(&defaults)) == kind(own),
                };
                assert!(same_kind, "{}: the bound {bound:?} is not of its kind", setting.flat);
            }
        }
        defaults.check().expect("the defaults keep every bound");
    }

    /// A value out of bounds is refused in a sentence naming the setting, its bounds (another
    /// setting with its value) and the value given.
    #[test]
    fn a_value_out_of_bounds_is_refused_naming_the_setting_its_bounds_and_the_value() {
        let refused = |flags: &[(&str, &str)]| Config::load(None, [], env(flags)).unwrap_err().to_string();
        assert_eq!(
            refused(&[("lease_default", "2h")]),
            "lease_default must be between 1s and lease_max (1h), not 2h"
        );
        assert_eq!(
            refused(&[("long_poll_wait_max", "3m")]),
            "long_poll_wait_max must be at most 2m, not 3m: proxies cut longer requests"
        );
        assert_eq!(
            refused(&[("signal_retention", "1m"), ("signal_gap_grace", "5m")]),
            "signal_retention must be at least 1m and longer than signal_gap_grace (5m), not 1m"
        );
        assert_eq!(
            refused(&[("callbacks_in_flight_per_origin_max", "40")]),
            "callbacks_in_flight_per_origin_max must be between 1 and callbacks_in_flight_max (32), not 40"
        );
        assert_eq!(refused(&[("max_attempts", "0")]), "max_attempts must be between 1 and 1000, not 0");
        assert_eq!(
            refused(&[("tls_key", "/x/key.pem")]),
            "tls_cert and tls_key go together: give both PEM files, or neither"
        );
        assert_eq!(
            refused(&[("token_algorithm", "RS256")]),
            "token_algorithm is \"RS256\"; use HS256 or EdDSA"
        );
        assert!(refused(&[("trusted_proxies", "10.0.0.0/33")]).starts_with("trusted_proxies: "));
    }

    /// Text from the environment is read as the setting's form: digits stay text for a text
    /// setting, and a number is a number of seconds for a duration.
    #[test]
    fn environment_text_is_read_in_the_settings_form() {
        let config = Config::load(
            None,
            env(&[("AGENT_INBOX_JWKS_AUDIENCE", "12345"), ("AGENT_INBOX_LEASE_DEFAULT", "90")]),
            [],
        )
        .unwrap();
        assert_eq!(config.tokens.jwks_audience.as_deref(), Some("12345"));
        assert_eq!(config.inbox.lease_default, Duration::from_secs(90));
    }

    /// The README's table of settings is [`markdown_table`], between its markers; `UPDATE_README=1
    /// cargo test -p inbox-server readme_settings` writes it.
    #[test]
    fn readme_settings_table_is_the_tables() {
        const BEGIN: &str =
            "<!-- settings-table: made by UPDATE_README=1 cargo test -p inbox-server readme_settings -->\n";
        const END: &str = "<!-- settings-table end -->";
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let (Some(begin), Some(end)) = (readme.find(BEGIN), readme.find(END)) else {
            panic!("README.md has no settings table between {BEGIN:?} and {END:?}")
        };
        let (before, written, after) =
            (&readme[..begin + BEGIN.len()], &readme[begin + BEGIN.len()..end], &readme[end..]);
        let table = markdown_table();
        if std::env::var_os("UPDATE_README").is_some() {
            std::fs::write(&path, format!("{before}{table}{after}")).unwrap();
        } else {
            assert!(
                written == table,
                "README.md's settings table differs from the settings; run \
                 UPDATE_README=1 cargo test -p inbox-server readme_settings"
            );
        }
    }

    /// Each inbox default the store also enforces is the store's.
    #[test]
    fn inbox_defaults_are_the_stores() {
        let (inbox, store) = (InboxConfig::default(), inbox_store::StoreConfig::default());
        assert_eq!(inbox.lease_default.as_millis() as u64, store.lease_ms_default);
        assert_eq!(inbox.retention.as_millis() as u64, store.retention_ms);
        assert_eq!(inbox.payload_bytes_limit, store.payload_bytes_limit);
    }

    /// History recording is on by default (the store's default) and every layer can turn it
    /// off or on again: `[inbox] history`, the flat `history`, `AGENT_INBOX_HISTORY`, `--history`;
    /// the store is told.
    #[test]
    fn history_recording_is_a_setting_of_every_layer_and_reaches_the_store() {
        let default = Config::default();
        assert!(default.inbox.history);
        assert_eq!(default.inbox.history, inbox_store::StoreConfig::default().record_history);
        assert!(crate::database::store_config(&default).record_history);

        let dir = std::env::temp_dir().join(format!("agent-inbox-config-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sectioned = dir.join("sectioned.toml");
        std::fs::write(&sectioned, "[inbox]\nhistory = false\n").unwrap();
        let flat = dir.join("flat.toml");
        std::fs::write(&flat, "history = false\n").unwrap();
        for file in [&sectioned, &flat] {
            let off = Config::load(Some(file), [], []).unwrap();
            assert!(!off.inbox.history, "{}", file.display());
            assert!(!crate::database::store_config(&off).record_history);
        }
        let from_env = Config::load(None, env(&[("AGENT_INBOX_HISTORY", "false")]), []).unwrap();
        assert!(!from_env.inbox.history);
        let flag_wins = Config::load(
            Some(&sectioned),
            env(&[("AGENT_INBOX_HISTORY", "false")]),
            env(&[("history", "true")]),
        )
        .unwrap();
        assert!(flag_wins.inbox.history);
        assert!(crate::database::store_config(&flag_wins).record_history);
        let not_a_bool = dir.join("not_a_bool.toml");
        std::fs::write(&not_a_bool, "[inbox]\nhistory = \"sometimes\"\n").unwrap();
        let err = Config::load(Some(&not_a_bool), [], []).unwrap_err();
        assert!(err.to_string().contains("expected a boolean"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
