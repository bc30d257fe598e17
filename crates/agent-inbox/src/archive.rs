//! `archive export`: archived events leave the database for a file. Rows archived before a
//! time are written, page by page in key order, as gzip JSON Lines (one event with all its
//! metadata per line); the file is finished and synced to disk, then read back, and only the
//! rows it holds are deleted, in bounded batches. A write that fails deletes nothing; the
//! count and the SHA-256 of the uncompressed lines are printed so the file can be verified
//! (`gzip -dc FILE | sha256sum`).

use std::fs::File;
use std::io::{BufRead as _, BufReader, BufWriter, Write as _};
use std::path::Path;

use anyhow::{Context as _, bail};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use inbox_core::UnixMillis;
use inbox_store::{ARCHIVE_BATCH_MAX, ArchiveKey, SqlStore, archive_key_of_line};
use sha2::{Digest as _, Sha256};

use crate::cli::ExportArgs;
use crate::serve::{load_config, with_store};

pub async fn export(args: ExportArgs) -> anyhow::Result<()> {
    let config = load_config(&args.server)?;
    let (before, report) = with_store(&config, async |store| {
        let now = store.now();
        let before = match &args.before {
            None => now.minus_ms(config.inbox.archive_retention.as_millis() as u64),
            Some(text) => before_from(text, now)?,
        };
        if before > now {
            bail!("--before is in the future; rows archived from now on could not be exported completely");
        }
        Ok((before, export_to(store, before, &args.to).await?))
    })
    .await?;
    println!(
        "exported {} event(s) archived before {} to {}\nsha256 of the JSON Lines: {}\ndeleted {} row(s) from the archive",
        report.exported,
        inbox_api::time::format_utc(before.get()),
        args.to.display(),
        report.digest,
        report.deleted
    );
    Ok(())
}

struct Report {
    exported: u64,
    digest: String,
    deleted: u64,
}

fn before_from(text: &str, now: UnixMillis) -> anyhow::Result<UnixMillis> {
    if let Ok(at) = inbox_api::time::parse_utc(text) {
        return Ok(UnixMillis(at));
    }
    let age = humantime::parse_duration(text)
        .with_context(|| format!("--before {text:?} is neither an RFC 3339 time nor an age such as 90d"))?;
    Ok(now.minus_ms(age.as_millis() as u64))
}

async fn export_to(store: &SqlStore, before: UnixMillis, path: &Path) -> anyhow::Result<Report> {
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {} (it must not exist yet)", path.display()))?;
    let written = write_lines(store, before, file).await;
    let (exported, digest) = match written {
        Ok(done) => done,
        Err(err) => {
            let _ = std::fs::remove_file(path);
            return Err(err.context(format!("nothing was deleted; {} was removed", path.display())));
        }
    };
    // Delete what the durable file holds, read back from it: never a row it does not have.
    let (read_back, read_digest, deleted) = delete_what_the_file_holds(store, before, path).await?;
    if (read_back, &read_digest) != (exported, &digest) {
        bail!("{} reads back {read_back} event(s) with another digest than written", path.display());
    }
    Ok(Report { exported, digest, deleted })
}

async fn write_lines(store: &SqlStore, before: UnixMillis, file: File) -> anyhow::Result<(u64, String)> {
    let mut gzip = GzEncoder::new(BufWriter::new(file), Compression::default());
    let mut digest = Sha256::new();
    let mut exported = 0u64;
    let mut after: Option<ArchiveKey> = None;
    loop {
        let page = store.inbox().archived_page(before, after.as_ref(), ARCHIVE_BATCH_MAX).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        for row in &page {
            let mut line = serde_json::to_vec(&row.columns)?;
            line.push(b'\n');
            digest.update(&line);
            gzip.write_all(&line).context("cannot write the export file")?;
            exported += 1;
        }
    }
    let file = gzip.finish().context("cannot finish the export file")?;
    let file = file.into_inner().map_err(|e| e.into_error()).context("cannot flush the export file")?;
    file.sync_all().context("cannot sync the export file to disk")?;
    Ok((exported, hex::encode(digest.finalize())))
}

async fn delete_what_the_file_holds(
    store: &SqlStore,
    before: UnixMillis,
    path: &Path,
) -> anyhow::Result<(u64, String, u64)> {
    let reader = BufReader::new(GzDecoder::new(File::open(path)?));
    let mut digest = Sha256::new();
    let (mut read_back, mut deleted) = (0u64, 0u64);
    let mut keys = Vec::new();
    for line in reader.lines() {
        let line = line.with_context(|| format!("cannot read {} back", path.display()))?;
        digest.update(line.as_bytes());
        digest.update(b"\n");
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line)?;
        keys.push(archive_key_of_line(&object).context("an exported line names no archive key")?);
        read_back += 1;
        if keys.len() == ARCHIVE_BATCH_MAX as usize {
            deleted += store.inbox().delete_archived(before, &keys).await?;
            keys.clear();
        }
    }
    deleted += store.inbox().delete_archived(before, &keys).await?;
    Ok((read_back, hex::encode(digest.finalize()), deleted))
}
