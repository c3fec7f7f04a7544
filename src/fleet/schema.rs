//! Connecting to the fleet store and checking its schema. A fresh database is given toolhost's
//! tables; a schema that is older or newer than this toolhost's is an error the operator must
//! act on (`toolhost fleet-migrate`, or upgrading toolhost), never silently changed under other
//! hosts that may still use it.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::FleetError;
use crate::config::FleetConfig;

/// The PostgreSQL schema, beside the SQLite one (`migrations/postgres`).
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections a host keeps to the fleet store (plus one listening for approvals).
const POOL_SIZE: u32 = 2;

/// Where a database's schema stands against this toolhost's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    /// No toolhost tables yet.
    Empty,
    Current,
    Older {
        applied: i64,
        expected: i64,
    },
    Newer {
        applied: i64,
        known: i64,
    },
}

/// A pool on the fleet store, its connections bounded in time.
///
/// # Errors
/// [`FleetError::Connect`], with any password scrubbed from the message.
pub async fn connect(config: &FleetConfig) -> Result<PgPool, FleetError> {
    let options = PgConnectOptions::from_str(config.url.expose())
        .map_err(|err| FleetError::Connect(crate::secrets::redact_owned(err.to_string())))?
        .application_name("toolhost");
    let pool = PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .min_connections(0)
        .acquire_timeout(config.connect_timeout)
        .idle_timeout(Duration::from_secs(300))
        .connect_with(options);
    match tokio::time::timeout(config.connect_timeout, pool).await {
        Ok(Ok(pool)) => Ok(pool),
        Ok(Err(err)) => Err(FleetError::Connect(crate::secrets::redact_owned(err.to_string()))),
        Err(_) => Err(FleetError::Connect(format!("no answer within {:?}", config.connect_timeout))),
    }
}

/// Where the database's schema stands.
///
/// # Errors
/// [`FleetError::Database`], or [`FleetError::Foreign`] for a database that holds tables of
/// its own but no toolhost schema.
pub async fn check(pool: &PgPool) -> Result<Schema, FleetError> {
    let tracked: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text").fetch_one(pool).await?;
    if tracked.is_none() {
        let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetch_one(pool).await?;
        return match tables {
            0 => Ok(Schema::Empty),
            _ => Err(FleetError::Foreign),
        };
    }
    let applied: BTreeSet<i64> =
        sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations WHERE success").fetch_all(pool).await?.into_iter().collect();
    let known: BTreeSet<i64> = MIGRATOR.iter().map(|migration| migration.version).collect();
    let (last_applied, last_known) = (applied.last().copied().unwrap_or(0), known.last().copied().unwrap_or(0));
    if applied.iter().any(|version| !known.contains(version)) {
        return Ok(Schema::Newer { applied: last_applied, known: last_known });
    }
    if applied.len() < known.len() {
        return Ok(Schema::Older { applied: last_applied, expected: last_known });
    }
    Ok(Schema::Current)
}

/// Brings the schema to this toolhost's version (under sqlx's advisory lock: hosts that start
/// together migrate once).
///
/// # Errors
/// [`FleetError::Database`] naming what failed.
pub async fn migrate(pool: &PgPool) -> Result<(), FleetError> {
    MIGRATOR.run(pool).await.map_err(|err| FleetError::Database(crate::secrets::redact_owned(err.to_string())))
}

/// Connects and makes sure the schema is usable: a fresh database is migrated, any other
/// mismatch is an error.
///
/// # Errors
/// [`FleetError`].
pub async fn open(config: &FleetConfig) -> Result<PgPool, FleetError> {
    let pool = connect(config).await?;
    match check(&pool).await? {
        Schema::Current => Ok(pool),
        Schema::Empty => {
            migrate(&pool).await?;
            tracing::info!("created the fleet store's tables");
            Ok(pool)
        }
        Schema::Older { applied, expected } => Err(FleetError::SchemaOlder { applied, expected }),
        Schema::Newer { applied, known } => Err(FleetError::SchemaNewer { applied, known }),
    }
}
