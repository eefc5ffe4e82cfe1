//! `blis serve --kv-events-config`: publishing the simulated server's KV
//! events as vLLM does (vLLM 0.11, `vllm/distributed/kv_events.py`,
//! `ZmqEventPublisher`), so a KV-cache-aware router (llm-d's precise
//! prefix-cache scorer, Dynamo's KV router) can subscribe to it.
//!
//! * The config is vLLM's `--kv-events-config` JSON (`KVEventsConfig`):
//!   `enable_kv_cache_events`, `publisher` (`zmq` or `null`), `endpoint`
//!   (`tcp://*:5557`), `topic`, and the queue sizes, which BLIS accepts
//!   and does not need. `replay_endpoint` (a ROUTER socket that re-sends
//!   missed batches) is refused: BLIS does not keep a replay buffer.
//! * A ZeroMQ PUB socket bound to the endpoint sends one three-frame
//!   message per batch: the topic, the sequence number (8 bytes, big
//!   endian, from 0), and the batch encoded as msgspec encodes vLLM's
//!   `KVEventBatch` (`array_like`, `omit_defaults`, tagged events):
//!   `[ts, [event, ...]]` with `ts` in seconds since the Unix epoch and
//!   each event `["BlockStored", block_hashes, parent_block_hash,
//!   token_ids, block_size, lora_id, medium]`,
//!   `["BlockRemoved", block_hashes, medium]` or `["AllBlocksCleared"]`.
//!   As with any PUB socket, batches sent while nobody subscribes are lost.

use blis_engine::kv::events::{KvEvent, KvEventBatch};
use serde::Deserialize;
use serde::ser::{Serialize, SerializeTuple, Serializer};
use tokio::sync::mpsc;
use zeromq::{Socket, SocketSend, ZmqMessage};

/// vLLM's `KVEventsConfig`, as `--kv-events-config` takes it (JSON).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvEventsConfig {
    /// Whether events are published at all.
    #[serde(default)]
    pub enable_kv_cache_events: bool,
    /// `zmq` or `null` (nothing is published).
    #[serde(default = "null_publisher")]
    pub publisher: String,
    /// Where the PUB socket binds (`tcp://*:5557`; `*` is every interface).
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// vLLM's replay socket; refused when set.
    #[serde(default)]
    pub replay_endpoint: Option<String>,
    /// vLLM's replay buffer, in steps (accepted, unused).
    #[serde(default)]
    pub buffer_steps: Option<u64>,
    /// ZeroMQ high-water mark (accepted, unused).
    #[serde(default)]
    pub hwm: Option<u64>,
    /// vLLM's queue bound (accepted, unused).
    #[serde(default)]
    pub max_queue_size: Option<u64>,
    /// The first frame of every message.
    #[serde(default)]
    pub topic: String,
}

fn null_publisher() -> String {
    "null".into()
}

fn default_endpoint() -> String {
    "tcp://*:5557".into()
}

/// A `--kv-events-config` that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KvEventsConfigError {
    /// Not JSON, or an unknown field.
    #[error("--kv-events-config: {0}")]
    Parse(String),
    /// An unknown publisher.
    #[error("--kv-events-config: publisher `{0}`: allowed values are zmq, null")]
    Publisher(String),
    /// A replay endpoint.
    #[error("--kv-events-config: replay_endpoint is not supported (BLIS keeps no replay buffer); remove it")]
    Replay,
    /// An endpoint that is not `tcp://HOST:PORT`.
    #[error("--kv-events-config: endpoint `{0}`: expected tcp://HOST:PORT, e.g. tcp://*:5557")]
    Endpoint(String),
}

impl KvEventsConfig {
    /// Reads vLLM's JSON form.
    pub fn parse(json: &str) -> Result<KvEventsConfig, KvEventsConfigError> {
        let c: KvEventsConfig = serde_json::from_str(json).map_err(|e| KvEventsConfigError::Parse(e.to_string()))?;
        if !matches!(c.publisher.as_str(), "zmq" | "null") {
            return Err(KvEventsConfigError::Publisher(c.publisher));
        }
        if c.replay_endpoint.as_deref().is_some_and(|r| !r.is_empty()) {
            return Err(KvEventsConfigError::Replay);
        }
        c.bind_address()?;
        Ok(c)
    }

    /// Whether events are published: enabled, to ZeroMQ.
    pub fn publishes(&self) -> bool {
        self.enable_kv_cache_events && self.publisher == "zmq"
    }

    /// The endpoint with `*` spelled as every IPv4 interface, as the socket binds it.
    fn bind_address(&self) -> Result<String, KvEventsConfigError> {
        let bad = || KvEventsConfigError::Endpoint(self.endpoint.clone());
        let rest = self.endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        port.parse::<u16>().map_err(|_| bad())?;
        let host = if host == "*" { "0.0.0.0" } else { host };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(format!("tcp://{host}:{port}"))
    }
}

/// One event as msgspec encodes vLLM's tagged, array-like structs.
struct Wire<'a>(&'a KvEvent);

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            KvEvent::BlockStored { block_hashes, parent_block_hash, token_ids, block_size, medium } => {
                let mut t = s.serialize_tuple(7)?;
                t.serialize_element(self.0.tag())?;
                t.serialize_element(block_hashes)?;
                t.serialize_element(parent_block_hash)?;
                t.serialize_element(token_ids)?;
                t.serialize_element(block_size)?;
                t.serialize_element(&None::<u32>)?; // lora_id
                t.serialize_element(medium)?;
                t.end()
            }
            KvEvent::BlockRemoved { block_hashes, medium } => {
                let mut t = s.serialize_tuple(3)?;
                t.serialize_element(self.0.tag())?;
                t.serialize_element(block_hashes)?;
                t.serialize_element(medium)?;
                t.end()
            }
            KvEvent::AllBlocksCleared => {
                let mut t = s.serialize_tuple(1)?;
                t.serialize_element(self.0.tag())?;
                t.end()
            }
        }
    }
}

/// The msgpack payload of `batch` published at `ts` (seconds since the epoch).
pub fn encode_batch(batch: &KvEventBatch<'_>, ts: f64) -> Vec<u8> {
    let events: Vec<Wire<'_>> = batch.events.iter().map(Wire).collect();
    rmp_serde::to_vec(&(ts, events)).expect("plain numbers, strings and lists always encode")
}

/// Hands encoded batches to the publishing task; cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    payloads: mpsc::UnboundedSender<Vec<u8>>,
}

impl Publisher {
    /// Binds a PUB socket as `config` says and starts publishing what
    /// [`Publisher::publish`] is given, on the current tokio runtime.
    /// Returns the publisher and the bound endpoint (with its real port
    /// when the config asked for port 0).
    pub async fn start(config: &KvEventsConfig) -> Result<(Publisher, String), std::io::Error> {
        let address = config.bind_address().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut socket = zeromq::PubSocket::new();
        let bound =
            socket.bind(&address).await.map_err(|e| std::io::Error::other(format!("cannot bind the KV events endpoint {address}: {e}")))?;
        let (payloads, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let topic = bytes::Bytes::from(config.topic.clone().into_bytes());
        tokio::spawn(async move {
            let mut seq = 0u64;
            while let Some(payload) = rx.recv().await {
                let frames = vec![topic.clone(), bytes::Bytes::copy_from_slice(&seq.to_be_bytes()), bytes::Bytes::from(payload)];
                let message = ZmqMessage::try_from(frames).expect("three frames");
                // A PUB socket drops what no subscriber takes; a send error means the socket is gone.
                if socket.send(message).await.is_err() {
                    break;
                }
                seq += 1;
            }
        });
        Ok((Publisher { payloads }, bound.to_string()))
    }

    /// Publishes one encoded batch (dropped once the server stops).
    pub fn publish(&self, payload: Vec<u8>) {
        let _ = self.payloads.send(payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_configs_parse_and_bad_ones_are_refused_by_name() {
        let c = KvEventsConfig::parse(r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv"}"#)
            .unwrap();
        assert!(c.publishes());
        assert_eq!(c.bind_address().unwrap(), "tcp://0.0.0.0:5557");
        assert!(!KvEventsConfig::parse(r#"{"enable_kv_cache_events": true}"#).unwrap().publishes(), "the default publisher is null");
        assert_eq!(KvEventsConfig::parse(r#"{"publisher": "nats"}"#), Err(KvEventsConfigError::Publisher("nats".into())));
        assert_eq!(KvEventsConfig::parse(r#"{"replay_endpoint": "tcp://*:5558"}"#), Err(KvEventsConfigError::Replay));
        assert!(matches!(KvEventsConfig::parse(r#"{"endpoint": "ipc:///tmp/x"}"#), Err(KvEventsConfigError::Endpoint(_))));
        assert!(matches!(KvEventsConfig::parse(r#"{"endpoint": "tcp://*:99999"}"#), Err(KvEventsConfigError::Endpoint(_))));
        let unknown = KvEventsConfig::parse(r#"{"enable": true}"#).unwrap_err().to_string();
        assert!(unknown.contains("unknown field `enable`"), "{unknown}");
    }

    /// msgspec's array-like, tagged encoding, checked against the bytes
    /// msgpack's rules give (fixarray, fixstr, positive fixint, nil).
    #[test]
    fn batches_encode_as_msgspec_encodes_kv_event_batch() {
        let events = [
            KvEvent::BlockStored { block_hashes: vec![7], parent_block_hash: None, token_ids: vec![1, 2], block_size: 2, medium: "GPU" },
            KvEvent::BlockRemoved { block_hashes: vec![7], medium: "GPU" },
            KvEvent::AllBlocksCleared,
        ];
        let bytes = encode_batch(&KvEventBatch { instance: 0, time: blis_engine::time::Micros::ZERO, events: &events }, 0.5);
        let mut want = vec![0x92, 0xcb];
        want.extend_from_slice(&0.5f64.to_be_bytes());
        want.push(0x93);
        want.extend_from_slice(&[0x97, 0xab]);
        want.extend_from_slice(b"BlockStored");
        want.extend_from_slice(&[0x91, 0x07, 0xc0, 0x92, 0x01, 0x02, 0x02, 0xc0, 0xa3]);
        want.extend_from_slice(b"GPU");
        want.extend_from_slice(&[0x93, 0xac]);
        want.extend_from_slice(b"BlockRemoved");
        want.extend_from_slice(&[0x91, 0x07, 0xa3]);
        want.extend_from_slice(b"GPU");
        want.extend_from_slice(&[0x91, 0xb0]);
        want.extend_from_slice(b"AllBlocksCleared");
        assert_eq!(bytes, want);
    }
}
