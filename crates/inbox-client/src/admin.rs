//! The operators' endpoints (`/v1/admin/...`) as typed calls, for tools such as `agent-inbox
//! admin`. An admin access token authenticates them, and every call stays within that token's
//! tenant. Each answer carries the service's JSON as it came, beside the typed value, so a
//! tool can print exactly what the service said (fields this build does not know included).

use inbox_api::{
    AdminAgentKeysResponse, AdminCallbackView, AdminCallbacksResponse, AdminEventDetail, AdminEventsResponse,
    AdminSessionsResponse, InboxStatsResponse, ItemResults, ParkedEventsRequest, ParkedEventsResponse,
    QuarantineRequest,
};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::Api;
use crate::credentials::Credentials;
use crate::error::ClientError;
use crate::secret_store::Secret;

/// The operators' API of one service, as one admin identity. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Admin {
    api: Api,
}

/// A typed answer and the JSON it was read from.
#[derive(Debug, Clone)]
pub struct AdminAnswer<T> {
    pub value: T,
    pub json: Value,
}

/// Which events of one inbox to list (`GET /v1/admin/inboxes/{recipient_id}/events`).
#[derive(Debug, Clone, Default)]
pub struct EventsQuery {
    pub recipient_id: String,
    /// `available`, `retry_scheduled`, `claimed`, `acked`, `dead_letter`, `quarantined` or
    /// `expired`; every state when `None`.
    pub state: Option<String>,
    /// Events after this `inbox_seq` (the last one of the previous page), oldest first.
    pub after_seq: Option<u64>,
    /// Newest first, from the newest event or from before `before_seq`.
    pub newest_first: bool,
    pub before_seq: Option<u64>,
    pub limit: Option<u32>,
}

/// Which parked events to list (`GET /v1/admin/parked`).
#[derive(Debug, Clone, Default)]
pub struct ParkedQuery {
    /// One agent's; the whole tenant's when `None`.
    pub recipient_id: Option<String>,
    /// `dead_letter` or `quarantined`; both when `None`.
    pub state: Option<String>,
    pub limit: Option<u32>,
}

impl Admin {
    /// `base_url` like `http://127.0.0.1:8080`; `token` an access token of kind admin.
    pub fn new(base_url: &str, token: Secret) -> Result<Admin, ClientError> {
        Ok(Admin { api: Api::new(base_url, Credentials::access_token(token))? })
    }

    pub fn base_url(&self) -> &str {
        self.api.base_url()
    }

    /// Every inbox of the tenant with its depth, oldest unacknowledged age and sessions.
    pub async fn inboxes(&self, limit: Option<u32>) -> Result<AdminAnswer<InboxStatsResponse>, ClientError> {
        self.get(&with_query("/v1/admin/inboxes", &[("limit", limit.map(|n| n.to_string()))])).await
    }

    /// One inbox's events in `inbox_seq` order, oldest or newest first.
    pub async fn events(&self, query: &EventsQuery) -> Result<AdminAnswer<AdminEventsResponse>, ClientError> {
        let path = format!("/v1/admin/inboxes/{}/events", segment(&query.recipient_id));
        let params = [
            ("state", query.state.clone()),
            ("order", query.newest_first.then(|| "newest_first".to_owned())),
            ("after_seq", query.after_seq.map(|n| n.to_string())),
            ("before_seq", query.before_seq.map(|n| n.to_string())),
            ("limit", query.limit.map(|n| n.to_string())),
        ];
        self.get(&with_query(&path, &params)).await
    }

    /// One event with its history, live or archived.
    pub async fn event(
        &self,
        recipient_id: &str,
        event_id: &str,
    ) -> Result<AdminAnswer<AdminEventDetail>, ClientError> {
        self.get(&format!("/v1/admin/inboxes/{}/events/{}", segment(recipient_id), segment(event_id))).await
    }

    /// Dead-lettered and quarantined events, newest parked first.
    pub async fn parked(
        &self,
        query: &ParkedQuery,
    ) -> Result<AdminAnswer<ParkedEventsResponse>, ClientError> {
        let params = [
            ("recipient_id", query.recipient_id.clone()),
            ("state", query.state.clone()),
            ("limit", query.limit.map(|n| n.to_string())),
        ];
        self.get(&with_query("/v1/admin/parked", &params)).await
    }

    /// Sends parked events back to the inbox with a fresh budget of attempts.
    pub async fn requeue(
        &self,
        request: &ParkedEventsRequest,
    ) -> Result<AdminAnswer<ItemResults>, ClientError> {
        self.post("/v1/admin/parked/requeue", request).await
    }

    /// Deletes parked events for good.
    pub async fn purge(
        &self,
        request: &ParkedEventsRequest,
    ) -> Result<AdminAnswer<ItemResults>, ClientError> {
        self.post("/v1/admin/parked/purge", request).await
    }

    /// Sets available or claimed events aside for a person; a claimed event's lease ends.
    pub async fn quarantine(
        &self,
        request: &QuarantineRequest,
    ) -> Result<AdminAnswer<ItemResults>, ClientError> {
        self.post("/v1/admin/quarantine", request).await
    }

    /// Sends quarantined events back to the inbox, claimable again.
    pub async fn release(
        &self,
        request: &ParkedEventsRequest,
    ) -> Result<AdminAnswer<ItemResults>, ClientError> {
        self.post("/v1/admin/quarantine/release", request).await
    }

    /// Agent sessions, newest first, of one agent or the whole tenant.
    pub async fn sessions(
        &self,
        recipient_id: Option<&str>,
        limit: Option<u32>,
    ) -> Result<AdminAnswer<AdminSessionsResponse>, ClientError> {
        let params =
            [("recipient_id", recipient_id.map(str::to_owned)), ("limit", limit.map(|n| n.to_string()))];
        self.get(&with_query("/v1/admin/sessions", &params)).await
    }

    /// The tenant's callback registrations with their delivery state and recent deliveries.
    pub async fn callbacks(&self) -> Result<AdminAnswer<AdminCallbacksResponse>, ClientError> {
        self.get("/v1/admin/callbacks").await
    }

    /// Re-enables a callback registration disabled after failing past the server's bound; its
    /// agent's current head is delivered at once. One not disabled is answered unchanged.
    pub async fn enable_callback(
        &self,
        registration_id: &str,
    ) -> Result<AdminAnswer<AdminCallbackView>, ClientError> {
        let path = format!("/v1/admin/callbacks/{}/enable", segment(registration_id));
        self.post(&path, &serde_json::Map::new()).await
    }

    /// The tenant's agent signing keys (never their material).
    pub async fn agent_keys(&self) -> Result<AdminAnswer<AdminAgentKeysResponse>, ClientError> {
        self.get("/v1/admin/agent-keys").await
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<AdminAnswer<T>, ClientError> {
        typed(self.api.call::<(), Value>(Method::GET, path, None, crate::REQUEST_TIMEOUT).await?)
    }

    async fn post<Req: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
    ) -> Result<AdminAnswer<T>, ClientError> {
        typed(self.api.call::<Req, Value>(Method::POST, path, Some(request), crate::REQUEST_TIMEOUT).await?)
    }
}

fn typed<T: DeserializeOwned>(json: Value) -> Result<AdminAnswer<T>, ClientError> {
    let value = T::deserialize(&json).map_err(|err| ClientError::Protocol(format!("{err}")))?;
    Ok(AdminAnswer { value, json })
}

/// `path?name=value&...` with the values that are set, percent-encoded.
fn with_query(path: &str, params: &[(&str, Option<String>)]) -> String {
    let pairs: Vec<String> = params
        .iter()
        .filter_map(|(name, value)| value.as_deref().map(|value| format!("{name}={}", segment(value))))
        .collect();
    if pairs.is_empty() { path.to_owned() } else { format!("{path}?{}", pairs.join("&")) }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so an id typed with a
/// `/`, `?` or space reaches the service as the id it is (and is refused as one).
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_query_values_are_percent_encoded() {
        assert_eq!(segment("agent_alpha"), "agent_alpha");
        assert_eq!(segment("a/b c?"), "a%2Fb%20c%3F");
        assert_eq!(segment("ops@acme:1"), "ops%40acme%3A1");
        assert_eq!(with_query("/x", &[("a", None), ("b", None)]), "/x");
        assert_eq!(
            with_query(
                "/x",
                &[("state", Some("dead_letter".into())), ("s", None), ("limit", Some("5".into()))]
            ),
            "/x?state=dead_letter&limit=5"
        );
    }
}
