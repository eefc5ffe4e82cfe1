//! `--kv-events-output`: vLLM's KV-cache events (BlockStored,
//! BlockRemoved, AllBlocksCleared), one JSON line per batch.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use blis_engine::instance::Observer;
use blis_engine::kv::events::KvEventBatch;
use blis_engine::request::RequestRecord;

use super::AtomicFile;
use crate::error::BadInput;

/// Writes vLLM's KV events, one JSON line per batch (`--kv-events-output`).
pub struct KvEventsJson {
    file: AtomicFile,
    error: Option<std::io::Error>,
}

impl KvEventsJson {
    /// Starts the file.
    pub fn create(dest: &Path) -> Result<KvEventsJson, BadInput> {
        Ok(KvEventsJson { file: AtomicFile::create("kv-events-output", dest)?, error: None })
    }

    /// Finishes the file; reports the first write error, if any.
    pub fn commit(self) -> anyhow::Result<()> {
        if let Some(e) = self.error {
            return Err(e).context("writing --kv-events-output");
        }
        self.file.commit()
    }
}

impl Observer for KvEventsJson {
    fn on_finish(&mut self, _record: &RequestRecord) {}
    fn observes_tokens(&self) -> bool {
        false
    }
    fn on_kv_events(&mut self, batch: &KvEventBatch<'_>) {
        if self.error.is_none() {
            let w = self.file.writer();
            self.error = serde_json::to_writer(&mut *w, batch).map_err(std::io::Error::from).and_then(|()| writeln!(w)).err();
        }
    }
}
