//! The identities the daemon follows: one [`InboxFollower`] per login profile, started for
//! every profile at start (or those named with `--profile`) and for any other a client asks
//! about, restarted when its profile file names another identity (a new `login`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inbox_client::local_daemon::protocol::{ErrorCode, Identity, IdentityStatus, RequestError};
use inbox_client::local_daemon::{InboxFollower, InboxView};
use inbox_client::schedule::Backoff;
use inbox_client::{Api, Home, Profile, TransportConfig};

/// Every followed identity.
#[derive(Debug)]
pub struct Identities {
    home: Home,
    /// `--profile`: serve these only.
    only: Option<Vec<String>>,
    followed: Mutex<HashMap<String, Arc<Followed>>>,
}

/// One followed identity.
#[derive(Debug)]
pub struct Followed {
    pub profile: String,
    pub record: Profile,
    pub follower: InboxFollower,
    pub waiters: Counter,
    pub watchers: Counter,
}

/// A count of clients doing something, kept right by guards.
#[derive(Debug, Default)]
pub struct Counter(AtomicUsize);

/// Holds one count of a [`Counter`] until dropped.
#[derive(Debug)]
pub struct Counted<'a>(&'a Counter);

impl Counter {
    pub fn enter(&self) -> Counted<'_> {
        self.0.fetch_add(1, Ordering::AcqRel);
        Counted(self)
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Identities {
    pub fn new(home: Home, only: Vec<String>) -> Identities {
        Identities { home, only: (!only.is_empty()).then_some(only), followed: Mutex::default() }
    }

    /// Starts following every profile there is (or every one named); returns their names.
    pub fn start_all(&self) -> Vec<String> {
        let names = match &self.only {
            Some(only) => only.clone(),
            None => profile_names(&self.home),
        };
        let mut started = Vec::new();
        for name in names {
            match self.home.load_profile(&name).and_then(|record| self.follow(&name, record).map(|_| ())) {
                Ok(()) => started.push(name),
                Err(err) => tracing::warn!(profile = %name, error = %err, "not following this profile"),
            }
        }
        started
    }

    /// The followed identity a client asks about, started now if it was not yet.
    pub fn find(&self, asked: &Identity) -> Result<Arc<Followed>, RequestError> {
        if let Some(only) = &self.only
            && !only.contains(&asked.profile)
        {
            return Err(RequestError {
                code: ErrorCode::UnknownProfile,
                message: format!("this daemon serves the profiles {} only", only.join(", ")),
            });
        }
        let record = self.home.load_profile(&asked.profile).map_err(|err| RequestError {
            code: ErrorCode::UnknownProfile,
            message: format!("the daemon has no profile {:?}: {err}", asked.profile),
        })?;
        let ours = Identity::of_profile(&asked.profile, &record, None);
        if &ours != asked {
            return Err(RequestError {
                code: ErrorCode::IdentityMismatch,
                message: format!(
                    "the daemon's profile {:?} is agent {} of tenant {} at {}, not agent {} of tenant {} at {} (is it reading another configuration directory?)",
                    asked.profile,
                    ours.agent_id,
                    ours.tenant_id,
                    ours.server_url,
                    asked.agent_id,
                    asked.tenant_id,
                    asked.server_url
                ),
            });
        }
        self.follow(&asked.profile, record).map_err(|err| RequestError {
            code: ErrorCode::ServiceRefused,
            message: format!("cannot follow profile {:?}: {err}", asked.profile),
        })
    }

    /// Each followed identity as `status` shows it.
    pub fn statuses(&self) -> Vec<IdentityStatus> {
        let followed: Vec<Arc<Followed>> =
            self.followed.lock().expect("not poisoned").values().cloned().collect();
        let mut statuses: Vec<IdentityStatus> = followed.iter().map(|f| f.status()).collect();
        statuses.sort_by(|a, b| a.profile.cmp(&b.profile));
        statuses
    }

    /// The follower of `profile` for `record`: the running one, or a new one when none runs
    /// or the running one follows another identity.
    fn follow(&self, profile: &str, record: Profile) -> Result<Arc<Followed>, inbox_client::ClientError> {
        let mut followed = self.followed.lock().expect("not poisoned");
        if let Some(running) = followed.get(profile)
            && running.record == record
        {
            return Ok(running.clone());
        }
        let (_, credentials) = self.home.credentials(profile)?;
        let api = Api::new(&record.server_url, credentials)?;
        let transport = TransportConfig {
            // Back on a stream soon after an outage: local clients ask the service directly
            // meanwhile, each with a connection of its own.
            reconnect: Backoff { base: Duration::from_secs(1), max: Duration::from_secs(30) },
            ..TransportConfig::default()
        };
        tracing::info!(profile, agent = %record.agent_id, tenant = %record.tenant_id, server = %record.server_url, "following");
        let started = Arc::new(Followed {
            profile: profile.to_owned(),
            record,
            follower: InboxFollower::start(api, transport),
            waiters: Counter::default(),
            watchers: Counter::default(),
        });
        followed.insert(profile.to_owned(), started.clone());
        Ok(started)
    }
}

impl Followed {
    fn status(&self) -> IdentityStatus {
        let view: InboxView = self.follower.view().borrow().clone();
        IdentityStatus {
            profile: self.profile.clone(),
            server_url: self.record.server_url.clone(),
            tenant_id: self.record.tenant_id.clone(),
            agent_id: self.record.agent_id.clone(),
            head_seq: view.head_seq,
            claimable: view.claimable,
            transport: view.transport.as_str().to_owned(),
            fresh: view.fresh,
            waiters: self.waiters.get(),
            watchers: self.watchers.get(),
            error: view.error,
        }
    }
}

/// The profiles in the configuration directory: `NAME.json` files that read as profiles.
fn profile_names(home: &Home) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(home.dir()) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.strip_suffix(".json").map(str::to_owned))
        .filter(|name| !name.starts_with('.') && home.load_profile(name).is_ok())
        .collect();
    names.sort();
    names
}
