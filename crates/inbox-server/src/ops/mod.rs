//! The use cases, one module per subsystem (the names the store uses): what HTTP, the
//! WebSocket and seed 000's aliases all call, so a rule holds whichever transport asked.

pub mod a2a;
pub mod admin;
pub mod admin_views;
pub mod callbacks;
pub mod handoff;
pub mod health;
pub mod inbox;
mod publishing;
pub mod rooms;
pub mod sessions;
pub mod signals;
pub mod signatures;
pub mod streams;
pub mod tokens;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The calls that decide who may call (`caller.rs`).
    const AUTHORIZATIONS: [&str; 5] = [
        "caller.require(",
        "caller.require_any(",
        "caller.require_operator(",
        "caller.require_agent(",
        "caller.operator_or(",
    ];

    /// Use cases without an access token, each with its reason.
    const PUBLIC: [(&str, &str, &str); 3] = [
        ("health.rs", "ready", "readiness: load balancers ask without a token"),
        ("tokens.rs", "refresh", "the refresh token is the credential, checked by the token service"),
        ("tokens.rs", "public_keys", "the JWKS: public keys, for whoever verifies tokens"),
    ];

    /// ARCHITECTURE.md's check order: a use case decides who may call (scope, role) before it
    /// converts or judges any field, so a request both unauthorized and malformed is 403. Every
    /// function the transports can call (`pub`, `pub(crate)`) that takes a `Caller` starts by
    /// one of its authorization calls; every other top-level `pub async fn` is listed in
    /// [`PUBLIC`]. Helpers shared among the use cases are `pub(in crate::ops)`, out of the
    /// routes' reach. No use case makes a 403 of its own.
    #[test]
    fn every_use_case_decides_who_may_call_before_anything_else() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ops");
        let mut pending = vec![root.clone()];
        let mut files: Vec<PathBuf> = Vec::new();
        while let Some(path) = pending.pop() {
            if path.is_dir() {
                pending.extend(std::fs::read_dir(&path).expect("a directory").map(|e| e.unwrap().path()));
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("mod.rs") {
                files.push(path);
            }
        }
        let mut use_cases = 0;
        let mut public_seen = Vec::new();
        for path in &files {
            let file = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(path).expect("a use case file");
            let lines: Vec<&str> = text.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                let at = || format!("src/ops/{file}:{}", n + 1);
                assert!(!line.contains("ApiError::forbidden("), "{}: a 403 is a Caller method's", at());
                let code = line.trim_start();
                let Some(rest) = ["pub fn ", "pub async fn ", "pub(crate) fn ", "pub(crate) async fn "]
                    .iter()
                    .find_map(|start| code.strip_prefix(start))
                else {
                    continue;
                };
                let name = rest.split(['(', '<']).next().unwrap_or_default();
                let body = n + lines[n..].iter().position(|l| l.trim_end().ends_with('{')).expect("a body");
                let signature = lines[n..=body].join(" ");
                if signature.contains("&Caller") {
                    use_cases += 1;
                    let first = first_statement(&lines[body + 1..]);
                    assert!(
                        AUTHORIZATIONS.iter().any(|call| first.contains(call)),
                        "{}: `{name}` must start by deciding who may call ({}), not with `{first}`",
                        at(),
                        AUTHORIZATIONS.join(", ")
                    );
                } else if *line == code && code.contains("async fn ") {
                    let listed = PUBLIC.iter().any(|(f, n, _)| *f == file && *n == name);
                    assert!(listed, "{}: `{name}` takes no Caller; list it in PUBLIC with why", at());
                    public_seen.push((file.clone(), name.to_owned()));
                }
            }
        }
        for (file, name, _) in PUBLIC {
            assert!(
                public_seen.iter().any(|(f, n)| f == file && n == name),
                "PUBLIC lists {file} `{name}`, which is no longer there"
            );
        }
        assert!(use_cases >= 45, "found only {use_cases} use cases in {}", root.display());
    }

    /// The first statement of a body: up to its `;`, or the `{` of a `match`, `if` or `let`.
    fn first_statement(body: &[&str]) -> String {
        let mut statement = String::new();
        for line in body.iter().map(|l| l.trim()).filter(|l| !l.is_empty() && !l.starts_with("//")) {
            statement.push_str(line);
            if line.contains(';') || line.ends_with('{') {
                break;
            }
            statement.push(' ');
        }
        statement
    }
}
