//! The `secrets` subsystem: secrets at rest, sealed with keys the database never holds. Token
//! signing keys (`signing_key.secret`), callback secrets (`callback_registration.secret`,
//! `previous_secret`), agents' hmac-sha256 keys (`agent_signing_key.key_material`) and A2A
//! webhooks' tokens and credentials (`a2a_push_config.secret`) are stored sealed ([`sealing`]), each beside the id of the key that sealed it; refresh tokens
//! stay hashes and public keys stay public.
//!
//! The keys come from a key file the server reads ([`keys`]). Which of them seals new secrets
//! is recorded in the database (`secrets_sealing_key`), so every node seals with the same one:
//! the file's first key at the first start, another once a rewrap names it. [`Secrets::prepare`]
//! runs at every start: it refuses keys that cannot open what the database holds, and seals
//! any secret not yet under the sealing key (clear values of an older version, values an
//! interrupted rewrap left), each row by compare-and-set, so several nodes starting at once
//! do the work once. [`Secrets::rewrap`] moves every secret under a new key while nodes serve.

mod keys;
mod queries;
pub(crate) mod sealing;

use std::collections::BTreeMap;

pub use keys::{
    SECRETS_KEY_LINE_PREFIX, SECRETS_KEYS_PER_FILE_MAX, SecretsKey, SecretsKeyError, SecretsKeys,
};
pub(crate) use sealing::Place;
pub use sealing::SecretBytes;

use crate::db::{Arg, DbConnection, DbRow};
use crate::store::with_retries;
use crate::{SqlStore, StoreError};

/// Rows one sealing pass reads at a time.
const PASS_ROWS_MAX: i64 = 200;
/// Pages one pass reads from one column before it moves on.
const PAGES_PER_PASS_MAX: u32 = 1_000;
/// Passes over every sealed column before a rewrap gives up on catching up with writers.
const PASSES_MAX: u32 = 50;

/// The secrets subsystem of one [`SqlStore`]: its keys, the sealing key, sealing passes.
/// A borrowed view, free to make: `store.secrets()`.
#[derive(Debug, Clone, Copy)]
pub struct Secrets<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// The keys secrets are sealed with, see [`Secrets`].
    pub fn secrets(&self) -> Secrets<'_> {
        Secrets { store: self }
    }
}

/// How many secrets each key has sealed (`None`: stored in clear), over every sealed column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealedCensus {
    pub by_key: BTreeMap<Option<String>, u64>,
}

impl SealedCensus {
    /// Secrets stored under a key other than `key_id`, or in clear.
    pub fn not_under(&self, key_id: &str) -> u64 {
        self.by_key.iter().filter(|(k, _)| k.as_deref() != Some(key_id)).map(|(_, n)| n).sum()
    }
}

/// What [`Secrets::prepare`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareReport {
    /// The key new secrets are sealed with.
    pub sealing_key_id: String,
    /// Secrets sealed (from clear) or resealed (from another key) under it.
    pub resealed: u64,
}

impl Secrets<'_> {
    /// The keys this store holds, or the refusal that says none are loaded.
    pub fn keys(self) -> Result<std::sync::Arc<SecretsKeys>, StoreError> {
        self.store.sealer().keys()
    }

    /// Checks `keys` against the database, then uses them: they must hold the sealing key and
    /// every key that sealed a stored secret. Then seals every secret not under the sealing
    /// key. Run at every start, after migrating; safe with several nodes at once.
    pub async fn prepare(self, keys: SecretsKeys) -> Result<PrepareReport, StoreError> {
        self.check(&keys).await?;
        self.store.sealer().set_keys(keys.clone());
        // Reads first: a start (or an operator command beside a busy node) that finds everything
        // in place writes nothing, so it never waits for SQLite's one writer.
        if self.recorded_sealing_key().await?.is_none() {
            with_retries!(self.store, self.record_sealing_key(keys.first().id(), false))?;
        }
        let sealing_key_id = self.sealing_key_id().await?;
        let resealed = match self.census().await?.not_under(&sealing_key_id) {
            0 => 0,
            _ => self.reseal_under(&sealing_key_id).await?,
        };
        Ok(PrepareReport { sealing_key_id, resealed })
    }

    /// Whether `keys` may replace the ones in use (a changed key file): they must hold the
    /// sealing key and every key a stored secret is sealed under. Nothing changes.
    pub async fn check(self, keys: &SecretsKeys) -> Result<(), StoreError> {
        let mut needed: Vec<String> =
            self.census().await?.by_key.into_keys().flatten().filter(|id| keys.get(id).is_none()).collect();
        if let Some(sealing) = self.recorded_sealing_key().await? {
            if keys.get(&sealing).is_none() && !needed.contains(&sealing) {
                needed.push(sealing);
            }
        }
        if needed.is_empty() {
            return Ok(());
        }
        Err(StoreError::Sealing(format!(
            "the database holds secrets sealed under key(s) {} and the secrets key file holds only {}: it is the \
             wrong file, or a key still in use was removed",
            needed.join(", "),
            keys.ids().join(", ")
        )))
    }

    /// How many sealed values this store decrypted since it connected: a value read again is
    /// found among those already opened, so serving requests does not move this.
    pub fn decryptions(self) -> u64 {
        self.store.sealer().decryptions()
    }

    /// Uses `keys` from now on (a key file changed while serving); call [`Self::check`] first.
    pub fn use_keys(self, keys: SecretsKeys) {
        self.store.sealer().set_keys(keys);
    }

    /// Seals every secret under `new_key_id` while nodes serve: records it as the sealing key
    /// (nodes seal new secrets with it from their next write on), then reseals each secret
    /// stored under another key, by compare-and-set, until none is left. The loaded keys must
    /// hold the new key and every key in use, and so must every serving node's key file.
    /// Returns how many secrets were resealed.
    pub async fn rewrap(self, new_key_id: &str) -> Result<u64, StoreError> {
        let keys = self.keys()?;
        if keys.get(new_key_id).is_none() {
            return Err(StoreError::Sealing(format!("the loaded keys do not hold the new key {new_key_id}")));
        }
        self.check(&keys).await?;
        with_retries!(self.store, self.record_sealing_key(new_key_id, true))?;
        self.reseal_under(new_key_id).await
    }

    /// Records `key_id` as the sealing key when none is recorded, or (with `replace`) always.
    async fn record_sealing_key(self, key_id: &str, replace: bool) -> Result<(), StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let sql = queries::INSERT_SEALING_KEY.text(self.store.dialect());
        pooled.conn().execute(sql, &[Arg::Str(key_id), Arg::I64(now.get())]).await?;
        if replace {
            pooled
                .conn()
                .execute(queries::UPDATE_SEALING_KEY, &[Arg::Str(key_id), Arg::I64(now.get())])
                .await?;
        }
        Ok(())
    }

    /// How many secrets each key sealed, over every sealed column.
    pub async fn census(self) -> Result<SealedCensus, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let mut census = SealedCensus::default();
        for column in SealedColumn::ALL {
            for row in pooled.conn().fetch_all(column.census_sql(), &[]).await? {
                *census.by_key.entry(row.opt_string("key_id")?).or_default() += row.i64("n")?.max(0) as u64;
            }
        }
        Ok(census)
    }

    /// The key new secrets are sealed with: the recorded one, else the loaded file's first.
    pub async fn sealing_key_id(self) -> Result<String, StoreError> {
        match self.recorded_sealing_key().await? {
            Some(key_id) => Ok(key_id),
            None => Ok(self.keys()?.first().id().to_owned()),
        }
    }

    /// The sealing key the database records; none until a node first prepared it (so nothing
    /// was ever sealed in it).
    pub async fn recorded_sealing_key(self) -> Result<Option<String>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let row = pooled.conn().fetch_optional(queries::SEALING_KEY, &[]).await?;
        row.map(|row| row.string("key_id")).transpose()
    }

    /// Reseals, pass after pass, every secret not under `key_id`, until a census finds none.
    async fn reseal_under(self, key_id: &str) -> Result<u64, StoreError> {
        let mut resealed = 0;
        for _ in 0..PASSES_MAX {
            for column in SealedColumn::ALL {
                resealed += self.reseal_column(column, key_id).await?;
            }
            if self.census().await?.not_under(key_id) == 0 {
                return Ok(resealed);
            }
        }
        Err(StoreError::Sealing(format!(
            "secrets kept appearing under keys other than {key_id} through {PASSES_MAX} passes: a node still seals with \
             another key (is the new key in every node's key file?); run the rewrap again"
        )))
    }

    async fn reseal_column(self, column: SealedColumn, key_id: &str) -> Result<u64, StoreError> {
        let sealer = self.store.sealer();
        let mut resealed = 0;
        let mut pooled = self.store.pools().writer().await?;
        for _ in 0..PAGES_PER_PASS_MAX {
            let rows = pooled
                .conn()
                .fetch_all(column.not_under_sql(), &[Arg::Str(key_id), Arg::I64(PASS_ROWS_MAX)])
                .await?;
            if rows.is_empty() {
                return Ok(resealed);
            }
            let mut changed_here = 0;
            for row in &rows {
                let place = column.place(row)?;
                let stored = row.bytes("value")?;
                let old_key = row.opt_string("sealed_by")?;
                let plaintext = match &old_key {
                    None => sealing::SecretBytes::new(stored.clone()),
                    Some(old) => sealer.open(&place, Some(old), &stored)?,
                };
                let sealed = sealer.seal(key_id, &place, &plaintext)?;
                let (first, second) = column.row_key(row)?;
                let done = pooled
                    .conn()
                    .execute(
                        column.reseal_sql(),
                        &[
                            Arg::Bytes(&sealed),
                            Arg::Str(key_id),
                            Arg::Str(&first),
                            Arg::Str(&second),
                            Arg::Bytes(&stored),
                            Arg::Str(old_key.as_deref().unwrap_or("")),
                        ],
                    )
                    .await;
                changed_here += match done {
                    Ok(done) => done.rows_affected,
                    // Another node (a Galera member) resealed it at the same moment; the next
                    // pass sees whichever won.
                    Err(StoreError::Contention { .. }) => 0,
                    Err(err) => return Err(err),
                };
            }
            resealed += changed_here;
            // Rows another node resealed (or changed) first are not read again by this
            // query; if every row of a full page was taken elsewhere, the next page differs.
            if (rows.len() as i64) < PASS_ROWS_MAX {
                return Ok(resealed);
            }
        }
        // Left for the next pass, after the census.
        Ok(resealed)
    }
}

/// Seals `plaintext` for `place` with the database's sealing key, on the connection (or in the
/// transaction) about to store it. Returns the stored form and the key's id.
pub(crate) async fn seal_for_storing(
    store: &SqlStore,
    conn: &mut DbConnection<'_>,
    place: &Place,
    plaintext: &[u8],
) -> Result<(Vec<u8>, String), StoreError> {
    let sealer = store.sealer();
    let keys = sealer.keys()?;
    let key_id = match conn.fetch_optional(queries::SEALING_KEY, &[]).await? {
        Some(row) => row.string("key_id")?,
        None => keys.first().id().to_owned(),
    };
    if keys.get(&key_id).is_none() {
        return Err(StoreError::Sealing(format!(
            "the database seals new secrets under key {key_id}, which this node's secrets key file does not hold; \
             add the key to the file (every node needs it before a rewrap names it)"
        )));
    }
    let sealed = sealer.seal(&key_id, place, plaintext)?;
    Ok((sealed, key_id))
}

/// A column that holds sealed secrets: where its rows are, and each row's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SealedColumn {
    SigningKey,
    CallbackSecret,
    CallbackPrevious,
    AgentKey,
    A2aPushSecret,
}

impl SealedColumn {
    const ALL: [SealedColumn; 5] = [
        SealedColumn::SigningKey,
        SealedColumn::CallbackSecret,
        SealedColumn::CallbackPrevious,
        SealedColumn::AgentKey,
        SealedColumn::A2aPushSecret,
    ];

    fn census_sql(self) -> &'static str {
        match self {
            SealedColumn::SigningKey => queries::SIGNING_KEY_CENSUS,
            SealedColumn::CallbackSecret => queries::CALLBACK_SECRET_CENSUS,
            SealedColumn::CallbackPrevious => queries::CALLBACK_PREVIOUS_CENSUS,
            SealedColumn::AgentKey => queries::AGENT_KEY_CENSUS,
            SealedColumn::A2aPushSecret => queries::A2A_PUSH_CENSUS,
        }
    }

    fn not_under_sql(self) -> &'static str {
        match self {
            SealedColumn::SigningKey => queries::SIGNING_KEYS_NOT_UNDER,
            SealedColumn::CallbackSecret => queries::CALLBACK_SECRETS_NOT_UNDER,
            SealedColumn::CallbackPrevious => queries::CALLBACK_PREVIOUS_NOT_UNDER,
            SealedColumn::AgentKey => queries::AGENT_KEYS_NOT_UNDER,
            SealedColumn::A2aPushSecret => queries::A2A_PUSH_NOT_UNDER,
        }
    }

    fn reseal_sql(self) -> &'static str {
        match self {
            SealedColumn::SigningKey => queries::RESEAL_SIGNING_KEY,
            SealedColumn::CallbackSecret => queries::RESEAL_CALLBACK_SECRET,
            SealedColumn::CallbackPrevious => queries::RESEAL_CALLBACK_PREVIOUS,
            SealedColumn::AgentKey => queries::RESEAL_AGENT_KEY,
            SealedColumn::A2aPushSecret => queries::RESEAL_A2A_PUSH,
        }
    }

    /// The row's place, from the columns its `not_under_sql` reads.
    fn place(self, row: &DbRow) -> Result<Place, StoreError> {
        Ok(match self {
            SealedColumn::SigningKey => {
                Place::signing_key(&row.string("purpose")?, &row.string("key_id")?, &row.string("algorithm")?)
            }
            SealedColumn::CallbackSecret | SealedColumn::CallbackPrevious => Place::callback_secret(
                &row.string("tenant_id")?,
                &row.string("registration_id")?,
                &row.string("secret_id")?,
            ),
            SealedColumn::AgentKey => Place::agent_key(
                &row.string("tenant_id")?,
                &row.string("key_id")?,
                &row.string("agent_id")?,
                &row.string("algorithm")?,
            ),
            SealedColumn::A2aPushSecret => Place::a2a_push_secret(
                &row.string("tenant_id")?,
                &row.string("task_id")?,
                &row.string("config_id")?,
            ),
        })
    }

    /// The two values `reseal_sql` names its row by.
    fn row_key(self, row: &DbRow) -> Result<(String, String), StoreError> {
        Ok(match self {
            SealedColumn::SigningKey => (row.string("key_id")?, row.string("purpose")?),
            SealedColumn::CallbackSecret | SealedColumn::CallbackPrevious => {
                (row.string("registration_id")?, row.string("secret_id")?)
            }
            SealedColumn::AgentKey => (row.string("tenant_id")?, row.string("key_id")?),
            SealedColumn::A2aPushSecret => (row.string("task_id")?, row.string("config_id")?),
        })
    }
}
