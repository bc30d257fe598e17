//! The host-transaction API: what an application needs to write its own rows and publish
//! inbox events in one transaction, on either backend, with the store's pools, statement
//! time limits and contention retries. `inbox-rooms` is built on nothing else, which keeps
//! this API honest: a domain the store does not know can use the inbox.
//!
//! Statements use `?` placeholders on both backends and bind [`Arg`]s; rows are read by
//! column name ([`DbRow`]). Open a [`Transaction`], run statements on its [`DbConnection`],
//! call [`crate::Inbox::publish_in`] with the same connection, then commit. A deadlock or
//! lock-wait victim surfaces as [`StoreError::Contention`]: run the whole transaction again,
//! for example under [`SqlStore::retry_on_contention`].

use std::future::Future;

pub use crate::db::{Arg, DbRow, Executed};
use crate::db::{Pooled, Tx};
pub use crate::dialect::{Sql, placeholders, push_repeated};
use crate::store::with_retries;
use crate::{DbConnection, SqlStore, StoreError};

/// A transaction on one of the store's connections. Dropped without [`Self::commit`], it
/// rolls back.
#[derive(Debug)]
pub struct Transaction(Tx);

impl Transaction {
    /// The connection to run statements on, inside this transaction.
    pub fn conn(&mut self) -> DbConnection<'_> {
        self.0.conn()
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        self.0.commit().await
    }
}

/// A pooled connection for reads outside a transaction (on SQLite, from the reader pool, so
/// it never waits for the writer).
#[derive(Debug)]
pub struct Connection(Pooled);

impl Connection {
    pub fn conn(&mut self) -> DbConnection<'_> {
        self.0.conn()
    }
}

impl SqlStore {
    /// Opens a transaction that may write; on SQLite it takes the write lock at once.
    pub async fn transaction(&self) -> Result<Transaction, StoreError> {
        Ok(Transaction(self.pools().begin().await?))
    }

    /// A connection for reads.
    pub async fn connection(&self) -> Result<Connection, StoreError> {
        Ok(Connection(self.pools().reader().await?))
    }

    /// Runs `operation` (a whole transaction) again while it fails with
    /// [`StoreError::Contention`], with the pauses and attempt limit the store's own
    /// operations use; other results are returned as they are.
    pub async fn retry_on_contention<T, F, Fut>(&self, mut operation: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        with_retries!(self, operation())
    }
}
