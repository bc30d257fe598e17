//! The HTTP routes, one file per resource, each with its own `router()`.

pub mod a2a;
pub mod admin;
pub mod admin_events;
pub mod admin_views;
pub mod agent_keys;
pub mod agents;
pub mod callbacks;
pub mod events;
pub mod health;
pub mod inbox;
pub mod rooms;
pub mod sessions;
pub mod streams;
pub mod tenant_policy;
pub mod tokens;
pub mod ws;

/// Every router under `/v1/admin/...`: the app mounts these, and the console hands its calls
/// to exactly these (`http/console/proxy.rs`), so a new admin route file is added here once.
pub fn admin_routers() -> axum::Router<crate::node::AppState> {
    admin::router().merge(admin_events::router()).merge(admin_views::router()).merge(tenant_policy::router())
}

#[cfg(test)]
mod tests {
    /// ARCHITECTURE.md's rule for where a request's checks live: a route extracts, calls one
    /// use case in `ops/` and maps its answer; the scope check, the field checks, the store,
    /// the secrets are the use case's. Read from every file here, so a new route is held to it
    /// without being listed.
    #[test]
    fn routes_leave_checks_and_the_store_to_the_use_cases() {
        let forbidden = [
            ".require(",
            "require_any",
            "require_operator",
            "require_agent",
            "operator_or",
            "check_agent",
            "check_tenant",
            "invalid_field",
            "crate::convert",
            ".store.",
            "random_bytes",
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/routes");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).expect("the routes directory") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("mod.rs") {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).expect("a route file");
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim_start().starts_with("//")) {
                if let Some(word) = forbidden.iter().find(|w| line.contains(*w)) {
                    panic!(
                        "{}:{}: `{word}` belongs in the use case (ops/), not the route",
                        path.display(),
                        n + 1
                    );
                }
            }
        }
        assert!(files >= 15, "found only {files} route files in {}", dir.display());
    }
}
