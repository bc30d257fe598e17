//! The running node's shared state: what every request, stream and background task of this
//! node reaches through one [`AppState`]. `lib.rs` assembles it once the database is reached
//! (`AppState::assemble`); every other module takes it from here.

use std::sync::Arc;

use inbox_store::SqlStore;

use crate::ack_batcher::AckBatcher;
use crate::config::Config;
use crate::head_cache::HeadCache;
use crate::heartbeats::Heartbeats;
use crate::hints::Hints;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::nonce_writer::NonceWriter;
use crate::ops::callbacks::sender::{CallbackSender, ResolverOverride};
use crate::ops::signatures::KeyCache;
use crate::proxies::TrustedProxies;
use crate::publish_batcher::PublishBatcher;
use crate::quotas::Quotas;
use crate::secrets_key::{LoadedKeys, Watch};
use crate::session_changes::SessionChanges;
use crate::shutdown::Shutdown;
use crate::tenant_policies::TenantPolicies;
use crate::tokens::TokenService;

/// What an embedding application or a test sets in code rather than in configuration.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// How callback host names are resolved; the system resolver by default.
    pub callback_resolver: ResolverOverride,
}

/// Everything a handler can reach: one shared [`NodeParts`], so the several clones each
/// request makes (every extractor and middleware takes its own) cost one reference count.
#[derive(Debug, Clone)]
pub struct AppState(Arc<NodeParts>);

impl std::ops::Deref for AppState {
    type Target = NodeParts;

    fn deref(&self) -> &NodeParts {
        &self.0
    }
}

/// The parts of a running node that requests and background tasks share.
#[derive(Debug)]
pub struct NodeParts {
    pub store: SqlStore,
    pub config: Arc<Config>,
    pub tokens: Arc<TokenService>,
    pub(crate) limits: Arc<Limits>,
    pub(crate) proxies: Arc<TrustedProxies>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) hints: Arc<Hints>,
    /// Wakes this node's A2A streams when a task changed here.
    pub(crate) a2a: Arc<crate::ops::a2a::Updates>,
    pub(crate) head_cache: Arc<HeadCache>,
    pub(crate) heartbeats: Arc<Heartbeats>,
    pub(crate) tenant_policies: Arc<TenantPolicies>,
    pub(crate) quotas: Arc<Quotas>,
    pub(crate) session_changes: Arc<SessionChanges>,
    /// This node's cache of agents' keys, for verifying signed requests.
    pub(crate) key_cache: KeyCache,
    /// Every outbound request to a callback URL leaves through it.
    pub(crate) callback_sender: CallbackSender,
    pub(crate) secrets_key: Arc<Watch>,
    pub(crate) nonces: NonceWriter,
    pub(crate) publisher: PublishBatcher,
    pub(crate) acknowledger: AckBatcher,
    pub(crate) shutdown: Shutdown,
}

/// What the node brings from reaching its database (`database::reach`).
#[derive(Debug)]
pub(crate) struct Reached {
    pub store: SqlStore,
    pub tokens: TokenService,
    pub secrets: LoadedKeys,
}

impl AppState {
    /// The node's state over a reached database: its per-node services started, its caches
    /// empty.
    pub(crate) fn assemble(
        config: Config,
        overrides: &Overrides,
        reached: Reached,
        metrics: Arc<Metrics>,
        proxies: TrustedProxies,
        shutdown: Shutdown,
    ) -> AppState {
        let Reached { store, tokens, secrets } = reached;
        let callback_sender = CallbackSender::new(&config, &overrides.callback_resolver);
        let nonces = NonceWriter::start(store.clone(), metrics.clone());
        let publisher = PublishBatcher::start(store.clone(), metrics.clone(), &config);
        let heartbeats = Heartbeats::start(config.sessions.heartbeat_interval, shutdown.clone());
        let head_cache = Arc::new(HeadCache::new(config.signals.notify_interval));
        let acknowledger = AckBatcher::start(store.clone());
        AppState(Arc::new(NodeParts {
            store,
            heartbeats,
            limits: Arc::new(Limits::new(&config)),
            proxies: Arc::new(proxies),
            config: Arc::new(config),
            tokens: Arc::new(tokens),
            metrics,
            hints: Arc::default(),
            a2a: Arc::default(),
            head_cache,
            tenant_policies: Arc::default(),
            quotas: Arc::default(),
            session_changes: Arc::default(),
            key_cache: KeyCache::default(),
            callback_sender,
            secrets_key: Arc::new(Watch::new(secrets.file.clone(), secrets.keys.clone())),
            nonces,
            publisher,
            acknowledger,
            shutdown,
        }))
    }

    /// The largest request body accepted: the payload limit plus room for the envelope.
    pub(crate) fn body_bytes_limit(&self) -> usize {
        self.config.inbox.payload_bytes_limit + 64 * 1024
    }
}
