//! A vLLM server's startup log read as `server-facts.yaml`: what inference-perf
//! does not record about the server, and the log does.
//!
//! The lines read (vLLM 0.7 to 0.19 write them; each is optional):
//!
//! ```text
//! ... non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_num_seqs': 128, 'gpu_memory_utilization': 0.9, ...}
//! ... Using max model len 4096
//! ... Chunked prefill is enabled with max_num_batched_tokens=2048.
//! ... Forcing kv cache block size to 64 for FlashMLA backend.
//! ... Asynchronous scheduling is enabled.
//! ... Initializing a V1 LLM engine (v0.11.0) with config: model='...', max_seq_len=4096, tensor_parallel_size=2,
//!     pipeline_parallel_size=1, data_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, ...,
//!     enable_prefix_caching=True, chunked_prefill_enabled=True, ...
//! ... GPU KV cache size: 119,392 tokens          (V1; V0 wrote "# GPU blocks: 7462, # CPU blocks: 2048")
//! ```
//!
//! The engine's configuration line gives the settings in effect; the
//! non-default arguments give what it does not (`max_num_seqs`,
//! `block_size`, `gpu_memory_utilization`, expert parallelism, a CPU KV
//! tier) and the `--quantization` flag (the engine line's `quantization`
//! is also a pre-quantized checkpoint's own method). Python literals are
//! read as Python writes them: quoted strings, numbers, `True` / `False` /
//! `None`, and nested lists, dicts and
//! constructor calls kept whole.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use blis_cluster::MAX_INSTANCES;
use blis_engine::kv::VLLM_BLOCK_SIZES;
use blis_physics::catalog;
use blis_physics::model::ModelConfig;
use blis_physics::vllm::{ASYNC_SCHEDULING_DEFAULT_SINCE, KV_CACHE_DTYPES, KvCacheDtype};

use crate::experiment::facts::{CpuOffloadFact, MAX_GPU_BLOCKS, ServerFacts, one_group_blocks};

/// vLLM's default KV block size, when the log names none.
pub const DEFAULT_BLOCK_SIZE: u32 = 16;

/// A Python literal from a log line: what BLIS reads of it.
#[derive(Clone, Debug, PartialEq)]
pub enum PyValue {
    /// `True` / `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A quoted string (unquoted here), or a bare word (`auto`, `torch.bfloat16`).
    Str(String),
    /// `None`.
    None,
    /// Anything else (a list, dict or constructor call), as written.
    Other(String),
}

impl PyValue {
    fn parse(raw: &str) -> PyValue {
        let raw = raw.trim();
        match raw {
            "True" => return PyValue::Bool(true),
            "False" => return PyValue::Bool(false),
            "None" => return PyValue::None,
            _ => {}
        }
        if let Ok(i) = raw.parse::<i64>() {
            return PyValue::Int(i);
        }
        // Python's integers have no bound: one beyond i64 is kept as written, not rounded to a float.
        if raw.strip_prefix('-').unwrap_or(raw).bytes().all(|b| b.is_ascii_digit()) && !raw.is_empty() {
            return PyValue::Other(raw.to_string());
        }
        if let Ok(f) = raw.parse::<f64>() {
            return PyValue::Float(f);
        }
        if let Some(s) = unquote(raw) {
            return PyValue::Str(s);
        }
        if raw.starts_with(['[', '{', '(']) || raw.contains('(') {
            return PyValue::Other(raw.to_string());
        }
        PyValue::Str(raw.to_string())
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            PyValue::Int(i) => Some(*i as f64),
            PyValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    fn as_bool(&self) -> Option<bool> {
        match self {
            PyValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A setting's name: a string, `None` as absent.
    fn as_name(&self) -> Option<&str> {
        match self {
            PyValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl std::fmt::Display for PyValue {
    /// The value as the log wrote it (a string unquoted).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PyValue::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            PyValue::Int(i) => write!(f, "{i}"),
            PyValue::Float(x) => write!(f, "{x}"),
            PyValue::Str(t) | PyValue::Other(t) => f.write_str(t),
            PyValue::None => f.write_str("None"),
        }
    }
}

/// A quoted Python string's contents (backslash escapes resolved), or
/// `None` when `raw` is not one quoted string.
fn unquote(raw: &str) -> Option<String> {
    let quote = raw.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let body = raw.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            c if c == quote => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// `text` split at each top-level `sep`: not inside quotes, brackets,
/// braces, parentheses or `<...>` reprs.
fn split_top_level(text: &str, sep: char) -> Vec<&str> {
    let (mut parts, mut depth, mut quote, mut start, mut escaped) = (Vec::new(), 0i32, None::<char>, 0, false);
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '[' | '{' | '(' | '<' => depth += 1,
            ']' | '}' | ')' | '>' => depth -= 1,
            _ if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The `{'key': value, ...}` of a `non-default args:` line; `None` when
/// the text is not one whole dict (a line cut short lacks its closing `}`,
/// and its last value may be cut too).
fn python_dict(text: &str) -> Option<BTreeMap<String, PyValue>> {
    let inner = text.trim().strip_prefix('{').and_then(|t| t.trim_end().strip_suffix('}'))?;
    Some(
        split_top_level(inner, ',')
            .into_iter()
            .filter_map(|item| {
                let (key, value) = item.split_once(':')?;
                Some((unquote(key.trim())?, PyValue::parse(value)))
            })
            .collect(),
    )
}

/// The `key=value, ...` of the engine's configuration line.
fn keyword_list(text: &str) -> BTreeMap<String, PyValue> {
    split_top_level(text, ',')
        .into_iter()
        .filter_map(|item| {
            let (key, value) = item.split_once('=')?;
            let key = key.trim();
            key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_').then(|| (key.to_string(), PyValue::parse(value)))
        })
        .collect()
}

/// The number a log line states at the start of `text`: its first word,
/// without a trailing `,` or `.` and without thousands separators (vLLM's
/// `{:,}`: groups of exactly three digits after the first). A word that is
/// no number stays a string, for [`count`] to name.
fn stated_number(text: &str) -> PyValue {
    let word = text.split_whitespace().next().unwrap_or("").trim_end_matches([',', '.']);
    let groups: Vec<&str> = word.trim_start_matches('-').split(',').collect();
    let grouped = groups.len() > 1
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit()))
        && (1..=3).contains(&groups[0].len())
        && groups[1..].iter().all(|g| g.len() == 3);
    PyValue::parse(&if grouped { word.replace(',', "") } else { word.to_string() })
}

/// `value` as a whole number in `min..=max`, or why it is not one.
fn count(value: &PyValue, min: u64, max: u64) -> Result<u64, String> {
    let whole = |f: f64| f.is_finite() && f.fract() == 0.0;
    match value {
        PyValue::Int(i) => {
            u64::try_from(*i).ok().filter(|n| (min..=max).contains(n)).ok_or_else(|| format!("out of range: must be from {min} to {max}"))
        }
        // An integer beyond i64 reads as a word of digits (or, written as a float, a whole float).
        PyValue::Float(f) if whole(*f) => Err(format!("out of range: must be from {min} to {max}")),
        PyValue::Str(t) | PyValue::Other(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("out of range: must be from {min} to {max}"))
        }
        _ => Err(format!("not a whole number from {min} to {max}")),
    }
}

/// `value` checked by `check`; `None`, with a note in `remarks` naming
/// `key`, the value and why, when the check refuses it.
fn usable<T>(
    remarks: &mut Vec<String>,
    key: &str,
    value: Option<&PyValue>,
    check: impl FnOnce(&PyValue) -> Result<T, String>,
) -> Option<T> {
    let value = value?;
    check(value).map_err(|why| remarks.push(format!("{key} {value}: {why}; ignored"))).ok()
}

/// The first of the `values` a line states, with a note in `remarks` when
/// a later one differs (`what` names the line).
fn first_stated<'a>(remarks: &mut Vec<String>, what: &str, values: &'a [PyValue]) -> Option<&'a PyValue> {
    let first = values.first()?;
    if let Some(other) = values.iter().find(|v| *v != first) {
        remarks.push(format!("{what}: logged as {first} and later as {other}; the first is read"));
    }
    Some(first)
}

/// Whether vLLM `version` ("0.11.0", "0.13.1.dev42+g…") schedules
/// asynchronously when not told ([`ASYNC_SCHEDULING_DEFAULT_SINCE`] on);
/// `None` for a version that does not start with two numbers (after an
/// optional `v`).
pub(crate) fn async_scheduling_by_default(version: &str) -> Option<bool> {
    let mut parts = version.trim().trim_start_matches('v').split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next()??, parts.next()??);
    Some((major, minor) >= ASYNC_SCHEDULING_DEFAULT_SINCE)
}

/// `value` as a `u32` count from 1 (sequences, tokens).
fn positive_u32(value: &PyValue) -> Result<u32, String> {
    count(value, 1, u64::from(u32::MAX)).map(|n| n as u32)
}

/// What a vLLM startup log says about its server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoggedServer {
    /// vLLM's version, from the engine's configuration line.
    pub vllm_version: Option<String>,
    /// The model served (a HuggingFace id or a local path).
    pub model: Option<String>,
    /// `--pipeline-parallel-size`.
    pub pipeline_parallel_size: Option<u32>,
    /// `--enforce-eager`.
    pub enforce_eager: Option<bool>,
    /// KV cache capacity in tokens (V1's "GPU KV cache size").
    pub kv_cache_tokens: Option<u64>,
    /// KV blocks (V0's "# GPU blocks").
    pub gpu_blocks: Option<u64>,
    /// V1's "Maximum concurrency for N tokens per request".
    pub max_concurrency: Option<f64>,
    /// Engine configuration lines: more than one per data-parallel rank
    /// means the log holds several server starts, of which the first is read.
    pub engine_starts: u32,
    /// The facts as `server-facts.yaml` keys: each the log gave; `hardware`
    /// only when a kernel configuration's `device_name` names a bundled GPU
    /// (the fused-MoE and block-FP8 tuning files vLLM reports loading).
    pub facts: ServerFacts,
    /// What reading found wrong, one line each: a value stated that BLIS
    /// cannot use (left out of `facts`), a line stated twice differently.
    remarks: Vec<String>,
}

/// The bundled GPU a `device_name=NVIDIA_H100_80GB_HBM3` of a kernel
/// configuration file names, if any.
fn device_gpu(line: &str) -> Option<&'static str> {
    let name = line.split("device_name=").nth(1)?;
    let name: String = name.chars().take_while(|c| !matches!(c, ',' | '.' | ' ' | '/')).collect();
    blis_physics::catalog::find_gpu(&name.replace('_', " ")).map(|g| g.name)
}

impl LoggedServer {
    /// Reads `text`, a vLLM server log; an error when it has none of the
    /// lines above (not a vLLM log, or one cut before the engine started).
    /// A value the log states that BLIS cannot use (`block_size: 7`, a
    /// negative count, a utilisation above 1, a tensor-parallel degree that
    /// does not shard a bundled model's heads) is left out of the facts,
    /// with a note saying so ([`LoggedServer::notes`]): what is read passes
    /// the checks `blis validate` applies to `server-facts.yaml`.
    pub fn read(text: &str) -> Result<LoggedServer, String> {
        let mut s = LoggedServer::default();
        let (mut args_line, mut engine) = (None, BTreeMap::new());
        let (mut seen, mut max_len, mut budget, mut forced_block, mut async_on, mut gpu) = (false, None, None, None, None, None);
        let (mut kv_tokens, mut gpu_blocks, mut concurrency) = (Vec::new(), Vec::new(), Vec::new());
        for line in text.lines() {
            let after = |marker: &str| line.find(marker).map(|i| &line[i + marker.len()..]);
            gpu = gpu.or_else(|| device_gpu(line));
            if let Some(rest) = after("non-default args: ") {
                args_line = args_line.or_else(|| Some(python_dict(rest)));
            } else if let Some(rest) = after("Initializing a V1 LLM engine (v")
                .or(after("Initializing a V0 LLM engine (v"))
                .or(after("Initializing an LLM engine (v"))
            {
                s.engine_starts += 1;
                if engine.is_empty() {
                    let (version, config) = rest.split_once(')').unwrap_or((rest, ""));
                    s.vllm_version = Some(version.to_string());
                    engine = keyword_list(config.trim_start().strip_prefix("with config:").unwrap_or(config));
                }
            } else if let Some(rest) = after("Using max model len ") {
                max_len = max_len.or_else(|| Some(stated_number(rest)));
            } else if let Some(rest) = after("Chunked prefill is enabled with max_num_batched_tokens=") {
                budget = budget.or_else(|| Some(stated_number(rest)));
            } else if let Some(rest) = after("Forcing kv cache block size to ") {
                forced_block = Some(stated_number(rest));
            } else if line.contains("Asynchronous scheduling is enabled") {
                async_on = Some(true);
            } else if let Some(rest) = after("GPU KV cache size: ") {
                kv_tokens.push(stated_number(rest));
            } else if let Some(rest) = after("Maximum concurrency for ").and_then(|r| r.split_once("per request: ")) {
                concurrency.push(stated_number(rest.1.split_whitespace().next().unwrap_or("").trim_end_matches('x')));
            } else if let Some(rest) = after("# GPU blocks: ").or(after("# cuda blocks: ")) {
                gpu_blocks.push(stated_number(rest));
            } else {
                continue;
            }
            seen = true;
        }
        if !seen {
            return Err(
                "no vLLM startup line found (\"non-default args\", \"Initializing a V1 LLM engine\", \"GPU KV cache size\", ...)".into()
            );
        }
        let remarks = &mut s.remarks;
        let args_whole = !matches!(args_line, Some(None));
        if !args_whole {
            remarks.push("non-default args: the line ends before its closing `}` (cut short?); its settings are ignored".into());
        }
        let args = args_line.flatten().unwrap_or_default();
        // `None` is a setting left unset.
        let get = |key: &str| engine.get(key).or(args.get(key)).filter(|v| **v != PyValue::None);
        let arg = |key: &str| args.get(key).filter(|v| **v != PyValue::None);
        s.model = get("model").and_then(|v| v.as_name()).map(str::to_string);
        let ranks = |v: &PyValue| count(v, 1, u64::from(MAX_INSTANCES)).map(|n| n as u32);
        s.pipeline_parallel_size = usable(remarks, "pipeline_parallel_size", get("pipeline_parallel_size"), ranks);
        s.enforce_eager = get("enforce_eager").and_then(PyValue::as_bool);
        // A bundled model's heads decide which degrees shard it, as `blis validate` checks.
        let model =
            s.model.as_deref().and_then(catalog::find_model).and_then(|m| Some((m.id, ModelConfig::from_hf_json(m.config_json).ok()?)));
        let f = &mut s.facts;
        f.hardware = gpu.map(str::to_string);
        f.tensor_parallel_size = usable(remarks, "tensor_parallel_size", get("tensor_parallel_size"), |v| {
            let tp = positive_u32(v)?;
            match &model {
                Some((id, m)) => m.check_tensor_parallel(tp).map(|()| tp).map_err(|e| format!("{id}: {e}")),
                None => Ok(tp),
            }
        });
        f.data_parallel_size = usable(remarks, "data_parallel_size", get("data_parallel_size"), ranks).filter(|&d| d > 1);
        f.max_model_len =
            usable(remarks, "max_model_len", engine.get("max_seq_len").or(max_len.as_ref()).or(arg("max_model_len")), positive_u32);
        f.max_num_batched_tokens =
            usable(remarks, "max_num_batched_tokens", budget.as_ref().or(arg("max_num_batched_tokens")), positive_u32);
        f.max_num_seqs = usable(remarks, "max_num_seqs", arg("max_num_seqs"), positive_u32);
        let block_stated = forced_block.as_ref().or(arg("block_size"));
        f.block_size = usable(remarks, "block_size", block_stated, |v| {
            VLLM_BLOCK_SIZES
                .into_iter()
                .find(|&b| *v == PyValue::Int(i64::from(b)))
                .ok_or_else(|| format!("vLLM accepts {VLLM_BLOCK_SIZES:?} tokens"))
        });
        f.gpu_memory_utilization = usable(remarks, "gpu_memory_utilization", arg("gpu_memory_utilization"), |v| {
            v.as_f64().filter(|&u| u > 0.0 && u <= 1.0).ok_or_else(|| "must be in (0, 1]".to_string())
        });
        f.kv_cache_dtype = usable(remarks, "kv_cache_dtype", get("kv_cache_dtype"), |v| {
            let name = v.as_name().unwrap_or_default();
            name.parse::<KvCacheDtype>().map(|_| name.to_string()).map_err(|_| format!("allowed: {KV_CACHE_DTYPES}"))
        })
        .filter(|d| d != "auto");
        // The flag only: the engine line's `quantization` is also a
        // pre-quantized checkpoint's own method, which its config.json gives.
        f.quantization = arg("quantization").and_then(|v| v.as_name()).map(str::to_string);
        f.enable_prefix_caching = get("enable_prefix_caching").and_then(PyValue::as_bool);
        f.enable_chunked_prefill = engine.get("chunked_prefill_enabled").or(arg("enable_chunked_prefill")).and_then(PyValue::as_bool);
        // The flag, else the line a server with it on logs, else what the
        // server's version did by default.
        f.async_scheduling = arg("async_scheduling")
            .and_then(PyValue::as_bool)
            .or(async_on)
            .or_else(|| s.vllm_version.as_deref().and_then(async_scheduling_by_default));
        f.enable_expert_parallel = arg("enable_expert_parallel").and_then(PyValue::as_bool);
        let offloading_connector = arg("kv_transfer_config").is_some_and(|v| matches!(v, PyValue::Other(t) if t.contains("Offloading")));
        let offloading_size = usable(remarks, "kv_offloading_size", arg("kv_offloading_size"), |v| {
            v.as_f64().filter(|g| g.is_finite() && *g >= 0.0).ok_or_else(|| "must be a number of GiB, at least 0".to_string())
        });
        // Off only where the log says so: a size it states but BLIS cannot read, or a cut argument line, says nothing.
        let offloading_known = args_whole && offloading_size.is_some() == arg("kv_offloading_size").is_some();
        f.cpu_offload = if offloading_connector || offloading_size.is_some_and(|g| g > 0.0) {
            Some(CpuOffloadFact::On)
        } else {
            ((!engine.is_empty() || !args.is_empty()) && offloading_known).then_some(CpuOffloadFact::Off)
        };
        let count_all = |v: &PyValue| count(v, 0, i64::MAX as u64);
        let tokens = first_stated(remarks, "GPU KV cache size", &kv_tokens);
        s.kv_cache_tokens = usable(remarks, "GPU KV cache size", tokens, count_all);
        let blocks = first_stated(remarks, "# GPU blocks", &gpu_blocks);
        s.gpu_blocks = usable(remarks, "# GPU blocks", blocks, count_all);
        let stated = first_stated(remarks, "Maximum concurrency", &concurrency);
        s.max_concurrency = usable(remarks, "Maximum concurrency", stated, |v| {
            v.as_f64().filter(|c| c.is_finite() && *c > 0.0).ok_or_else(|| "must be a positive number".to_string())
        });
        s.facts.num_gpu_blocks = match s.num_gpu_blocks(block_stated.is_some()) {
            Ok(blocks) => blocks,
            Err(why) => {
                s.remarks.push(why);
                None
            }
        };
        // V1's tokens, from which the blocks were read, for a grouped cache's pool.
        if s.facts.num_gpu_blocks.is_some() && s.gpu_blocks.is_none() {
            (s.facts.kv_cache_tokens, s.facts.max_concurrency) = (s.kv_cache_tokens, s.max_concurrency);
        }
        Ok(s)
    }

    /// The KV block count: V0's blocks, else V1's capacity in tokens over
    /// the block size (`max_model_len` tokens per request over its blocks,
    /// as vLLM computes the capacity it logs). An error when the blocks are
    /// of a size the log states but BLIS cannot use (`block_size_stated`
    /// with no block size read), or are a count `blis validate` refuses:
    /// more than it supports, or too few to hold one request of
    /// `max_model_len` besides vLLM's null block (vLLM does not start then).
    fn num_gpu_blocks(&self, block_size_stated: bool) -> Result<Option<u64>, String> {
        if self.gpu_blocks.is_none() && self.kv_cache_tokens.is_none() {
            return Ok(None);
        }
        if block_size_stated && self.facts.block_size.is_none() {
            return Err("the KV cache size is ignored: it counts blocks of the block size ignored above".into());
        }
        let block_size = self.facts.block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
        let block = u64::from(block_size);
        let from_tokens = self.kv_cache_tokens.map(|tokens| one_group_blocks(tokens, block_size, self.facts.max_model_len));
        let Some(blocks) = self.gpu_blocks.or(from_tokens) else { return Ok(None) };
        let len = u64::from(self.facts.max_model_len.unwrap_or(1));
        let kv_tokens = blis_engine::kv::request_kv_tokens(blocks, block_size);
        if blocks > MAX_GPU_BLOCKS {
            Err(format!("num_gpu_blocks {blocks}: at most {MAX_GPU_BLOCKS} are supported; ignored"))
        } else if kv_tokens < len {
            Err(format!(
                "num_gpu_blocks {blocks}: blocks of {block} tokens that hold {kv_tokens} tokens besides vLLM's null block, fewer than one request of {len} tokens, \
                 and vLLM does not start with such a cache; ignored"
            ))
        } else {
            Ok(Some(blocks))
        }
    }

    /// Things the log says that BLIS does not simulate or cannot use, one
    /// line each: values left out of the facts, then settings simulated
    /// differently from the server.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.remarks.clone();
        if let Some(pp) = self.pipeline_parallel_size.filter(|&pp| pp > 1) {
            notes.push(format!("pipeline_parallel_size {pp}: BLIS does not simulate pipeline parallelism: the server is simulated with tensor parallelism alone"));
        }
        if self.enforce_eager == Some(true) {
            notes.push("enforce_eager: BLIS's coefficients are fitted on servers running CUDA graphs; an eager server's small decode steps are slower".into());
        }
        let ranks = self.facts.data_parallel_size.unwrap_or(1);
        if self.engine_starts > ranks {
            notes.push(format!(
                "{} engine starts for {ranks} data-parallel rank(s): the log holds several server starts; the first is read",
                self.engine_starts
            ));
        }
        if self.facts.num_gpu_blocks.is_some() && self.gpu_blocks.is_none() && self.facts.block_size.is_none() {
            notes.push(format!("no block size in the log: num_gpu_blocks assumes vLLM's default of {DEFAULT_BLOCK_SIZE} tokens"));
        }
        notes
    }

    /// The facts as `server-facts.yaml` text: a header naming `source` and
    /// the server, then each fact; `hardware` overrides the log's, and
    /// without either a comment asks for it.
    pub fn server_facts_yaml(&self, source: &str, hardware: Option<&str>) -> String {
        let mut y = String::new();
        let _ = writeln!(y, "# Facts about the vLLM server, read from {source} by `blis convert vllm-log`");
        if let Some(v) = &self.vllm_version {
            let _ = writeln!(y, "# vLLM {v}{}", self.model.as_ref().map_or(String::new(), |m| format!(", model {m}")));
        }
        let facts = ServerFacts { hardware: hardware.map(str::to_string).or(self.facts.hardware.clone()), ..self.facts.clone() };
        if facts.hardware.is_none() {
            let _ = writeln!(y, "# hardware:   (the log does not name the GPU: set it, e.g. H100-SXM-80GB)");
        }
        y + &serde_yaml_ng::to_string(&facts).unwrap_or_else(|e| panic!("server facts always serialise: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A V1 server's startup, in the shape vLLM 0.11 writes it (trimmed).
    const V1_LOG: &str = "\
(APIServer pid=7) INFO 11-20 10:00:01 [utils.py:233] non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'host': '0.0.0.0', \
'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 4096, 'served_model_name': ['llama', 'l,8b'], 'tensor_parallel_size': 2, \
'gpu_memory_utilization': 0.85, 'max_num_seqs': 128, 'quantization': 'fp8', 'kv_transfer_config': KVTransferConfig(kv_connector='OffloadingConnector', kv_role='kv_both')}
(APIServer pid=7) INFO 11-20 10:00:01 [model.py:1510] Using max model len 4096
(APIServer pid=7) INFO 11-20 10:00:02 [scheduler.py:205] Chunked prefill is enabled with max_num_batched_tokens=2048.
(APIServer pid=7) INFO 11-20 10:00:02 [vllm.py:790] Asynchronous scheduling is enabled.
(EngineCore_DP0 pid=9) INFO 11-20 10:00:09 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', \
speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=2, \
pipeline_parallel_size=1, data_parallel_size=1, quantization=fp8, enforce_eager=False, kv_cache_dtype=fp8_e4m3, \
structured_outputs_config=StructuredOutputsConfig(backend='auto', reasoning_parser=''), seed=0, enable_prefix_caching=True, \
chunked_prefill_enabled=True, compilation_config={'level': 3, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'sizes': [1, 2]}
(EngineCore_DP0 pid=9) INFO 11-20 10:01:10 [kv_cache_utils.py:1087] GPU KV cache size: 119,392 tokens
(EngineCore_DP0 pid=9) INFO 11-20 10:01:10 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: 29.15x
";

    /// A stated size no server has is ignored with a remark that says so,
    /// not one that names the very value as the limit.
    #[test]
    fn an_absurd_stated_cache_size_is_out_of_range() {
        let huge = V1_LOG.replace("GPU KV cache size: 119,392 tokens", "GPU KV cache size: 18446744073709551615 tokens");
        let s = LoggedServer::read(&huge).unwrap();
        assert_eq!(s.kv_cache_tokens, None);
        let remark = s.notes().into_iter().find(|n| n.contains("GPU KV cache size")).unwrap_or_default();
        assert!(remark.contains("out of range: must be from 0 to 9223372036854775807"), "{:?}", s.notes());
    }

    /// A pre-quantized checkpoint's method in the engine line is not the
    /// `--quantization` flag (its config.json says how it is stored).
    #[test]
    fn a_checkpoints_own_quantization_is_not_a_flag() {
        let prequantized = V1_LOG.replace(", 'quantization': 'fp8'", "").replace("quantization=fp8", "quantization=compressed-tensors");
        assert_eq!(LoggedServer::read(&prequantized).unwrap().facts.quantization, None);
    }

    #[test]
    fn a_v1_log_gives_the_settings_in_effect() {
        let s = LoggedServer::read(V1_LOG).unwrap();
        assert_eq!(s.vllm_version.as_deref(), Some("0.11.0"));
        assert_eq!(s.model.as_deref(), Some("meta-llama/Llama-3.1-8B-Instruct"));
        let f = &s.facts;
        assert_eq!((f.tensor_parallel_size, s.pipeline_parallel_size, f.data_parallel_size), (Some(2), Some(1), None));
        assert_eq!((f.max_model_len, f.max_num_batched_tokens, f.max_num_seqs), (Some(4096), Some(2048), Some(128)));
        assert_eq!(s.kv_cache_tokens, Some(119_392));
        assert_eq!(f.num_gpu_blocks, Some(7462), "119 392 tokens / 16");
        assert_eq!((f.kv_cache_tokens, f.max_concurrency), (Some(119_392), Some(29.15)), "kept for a grouped cache's pool");
        assert_eq!((f.kv_cache_dtype.as_deref(), f.quantization.as_deref()), (Some("fp8_e4m3"), Some("fp8")));
        assert_eq!((f.enable_prefix_caching, f.enable_chunked_prefill, f.async_scheduling), (Some(true), Some(true), Some(true)));
        assert_eq!((f.gpu_memory_utilization, f.cpu_offload, s.enforce_eager), (Some(0.85), Some(CpuOffloadFact::On), Some(false)));
        assert_eq!(f.hardware, None, "a dense model's log names no device");
        assert_eq!(s.notes().len(), 1, "{:?}", s.notes());
    }

    /// A server that does not say whether it scheduled asynchronously did
    /// what its version did by default: off before vLLM 0.14, on since.
    #[test]
    fn async_scheduling_follows_the_flag_the_log_line_or_the_versions_default() {
        let no_line = V1_LOG.replace("Asynchronous scheduling is enabled.", "");
        assert!(
            !no_line.contains("Asynchronous scheduling") && !no_line.contains("'async_scheduling'"),
            "the fixture states it only in that line"
        );
        let read = |log: &str| LoggedServer::read(log).unwrap().facts.async_scheduling;
        assert_eq!(read(V1_LOG), Some(true), "the line");
        assert_eq!(read(&no_line), Some(false), "0.11.0 did not by default");
        assert_eq!(read(&no_line.replace("(v0.11.0)", "(v0.14.1)")), Some(true));
        assert_eq!(read(&no_line.replace("(v0.11.0)", "(v0.13.1.dev42+g1234567)")), Some(false));
        assert_eq!(read(&no_line.replace("(v0.11.0)", "(v1.0.0)")), Some(true));
        assert_eq!(read(&no_line.replace("(v0.11.0)", "(vunknown)")), None, "no version: the default");
        let flagged = no_line.replace(
            "'model': 'meta-llama/Llama-3.1-8B-Instruct'",
            "'model': 'meta-llama/Llama-3.1-8B-Instruct', 'async_scheduling': True",
        );
        assert_eq!(read(&flagged), Some(true), "the flag");
    }

    #[test]
    fn the_facts_written_are_what_server_facts_yaml_reads() {
        let s = LoggedServer::read(V1_LOG).unwrap();
        let yaml = s.server_facts_yaml("server.log", Some("H100-SXM-80GB"));
        let facts: ServerFacts = blis_data::yaml::from_str(&yaml).unwrap();
        assert!(facts.other.is_empty(), "every key written is one server-facts.yaml reads: {:?}", facts.other);
        assert_eq!(facts.hardware.as_deref(), Some("H100-SXM-80GB"));
        assert_eq!((facts.tensor_parallel_size, facts.num_gpu_blocks, facts.max_num_seqs), (Some(2), Some(7462), Some(128)));
        assert_eq!(facts.cpu_offload.map(|c| c.may_be_on()), Some(true));
        let unnamed = s.server_facts_yaml("server.log", None);
        assert!(unnamed.contains("# hardware:") && !unnamed.contains("\nhardware:"), "{unnamed}");
    }

    #[test]
    fn v0_blocks_forced_block_sizes_and_partial_blocks() {
        let v0 = "INFO 05-01 [llm_engine.py:100] Initializing an LLM engine (v0.6.3) with config: model='m', max_seq_len=2048, \
                  tensor_parallel_size=1, pipeline_parallel_size=2, enforce_eager=True\nINFO 05-01 [executor_base.py:111] # GPU blocks: 7462, # CPU blocks: 2048\n";
        let s = LoggedServer::read(v0).unwrap();
        assert_eq!((s.gpu_blocks, s.facts.num_gpu_blocks, s.facts.cpu_offload), (Some(7462), Some(7462), Some(CpuOffloadFact::Off)));
        assert_eq!(s.facts.kv_cache_tokens, None, "V0 states its blocks");
        let notes = s.notes().join("\n");
        assert!(notes.contains("pipeline_parallel_size 2") && notes.contains("enforce_eager"), "{notes}");
        // FlashMLA's forced 64-token blocks; a max_model_len that is no whole number of blocks.
        let mla = "INFO [cuda.py:160] Forcing kv cache block size to 64 for FlashMLA backend.\nINFO Using max model len 1000\n\
                   INFO GPU KV cache size: 100,000 tokens\n";
        let s = LoggedServer::read(mla).unwrap();
        assert_eq!(s.facts.block_size, Some(64));
        // 1 000 tokens take 16 blocks of 64: capacity = blocks / 16 × 1 000.
        assert_eq!(s.facts.num_gpu_blocks, Some(1600));
    }

    /// A MoE server's log names its GPU in the tuning file it loads.
    #[test]
    fn a_kernel_configs_device_name_gives_the_gpu() {
        let line = |device: &str| {
            format!(
                "(EngineCore_DP0 pid=9) INFO [fused_moe.py:700] Using configuration from /vllm/configs/E=8,N=7168,device_name={device}.json for MoE layer.\n"
            )
        };
        for (device, want) in
            [("NVIDIA_H100_80GB_HBM3", Some("H100")), ("NVIDIA_A100-SXM4-80GB", Some("A100-80GB")), ("NVIDIA_B300_SXM6", None)]
        {
            let s = LoggedServer::read(&format!("{V1_LOG}{}", line(device))).unwrap();
            assert_eq!(s.facts.hardware.as_deref(), want, "{device}");
        }
        let s = LoggedServer::read(&format!("{V1_LOG}{}", line("NVIDIA_H100_80GB_HBM3"))).unwrap();
        let yaml = s.server_facts_yaml("vllm.log", None);
        assert!(yaml.contains("\nhardware: H100\n") && !yaml.contains("# hardware:"), "{yaml}");
        assert!(s.server_facts_yaml("vllm.log", Some("H200")).contains("\nhardware: H200\n"), "--hardware wins");
    }

    #[test]
    fn python_literals_split_only_at_the_top_level() {
        let d = python_dict("{'a': 'x, y', 'b': [1, {'c': 2}], 'd': None, 'e': \"it's\", 'f': -3, 'g': 1e-3}").unwrap();
        assert_eq!(python_dict("{'a': 1, 'b': 2"), None, "a dict cut short");
        assert_eq!(d["a"], PyValue::Str("x, y".into()));
        assert_eq!(d["b"], PyValue::Other("[1, {'c': 2}]".into()));
        assert_eq!(
            (d["d"].clone(), d["e"].clone(), d["f"].clone(), d["g"].clone()),
            (PyValue::None, PyValue::Str("it's".into()), PyValue::Int(-3), PyValue::Float(1e-3))
        );
        let k = keyword_list(" model='a=b', x=f(1, 2), mode=<Mode.FULL: (2, 1)>, dtype=torch.bfloat16");
        assert_eq!(k["model"], PyValue::Str("a=b".into()));
        assert_eq!(k["dtype"], PyValue::Str("torch.bfloat16".into()));
        assert_eq!(k.len(), 4);
    }

    /// A log of two server starts is read for its first, and says so.
    #[test]
    fn a_restarted_server_is_read_for_its_first_start() {
        let second =
            V1_LOG.replace("'max_num_seqs': 128", "'max_num_seqs': 256").replace("tensor_parallel_size=2", "tensor_parallel_size=4");
        let s = LoggedServer::read(&format!("{V1_LOG}{second}")).unwrap();
        assert_eq!((s.facts.max_num_seqs, s.facts.tensor_parallel_size, s.engine_starts), (Some(128), Some(2), 2));
        assert!(s.notes().iter().any(|n| n.contains("2 engine starts")), "{:?}", s.notes());
        assert!(!LoggedServer::read(V1_LOG).unwrap().notes().iter().any(|n| n.contains("engine starts")));
    }

    /// A block size vLLM does not accept (0, 7: no log vLLM writes) is
    /// left out with a note, and so are the KV blocks counted in it, never
    /// divided by.
    #[test]
    fn an_unusable_block_size_converts_no_blocks() {
        for log in [
            "INFO non-default args: {'block_size': 0}\nINFO GPU KV cache size: 1,000 tokens\n",
            "INFO Forcing kv cache block size to 0 for X\nINFO Using max model len 100\nINFO GPU KV cache size: 1,000 tokens\n",
            "INFO Forcing kv cache block size to 7 for X\nINFO # GPU blocks: 7462\n",
        ] {
            let s = LoggedServer::read(log).unwrap();
            assert_eq!((s.facts.block_size, s.facts.num_gpu_blocks), (None, None), "{log}");
            let notes = s.notes().join("\n");
            assert!(
                notes.contains("block_size ") && notes.contains("vLLM accepts [1, 8, 16") && notes.contains("KV cache size is ignored"),
                "{notes}"
            );
        }
    }

    /// Fuzzing found values BLIS cannot use dropped without a word, or
    /// written where `blis validate` then refused them: each is now left
    /// out, with a note naming the value.
    #[test]
    fn values_blis_cannot_use_are_noted_and_not_read() {
        let cases: [(&str, &str, &str); 20] = [
            ("tensor_parallel_size=2", "tensor_parallel_size=-1", "tensor_parallel_size -1"),
            ("tensor_parallel_size=2", "tensor_parallel_size=abc", "tensor_parallel_size abc"),
            ("tensor_parallel_size=2", "tensor_parallel_size=99999999999999999999", "tensor_parallel_size 99999999999999999999"),
            ("tensor_parallel_size=2", "tensor_parallel_size=0", "tensor_parallel_size 0"),
            ("tensor_parallel_size=2", "tensor_parallel_size=3", "attention heads are not divisible by tensor-parallel size 3"),
            ("tensor_parallel_size=2", "tensor_parallel_size=1000", "tensor_parallel_size 1000"),
            ("data_parallel_size=1", "data_parallel_size=0", "data_parallel_size 0"),
            ("max_seq_len=4096", "max_seq_len=-1", "max_model_len -1"),
            ("max_seq_len=4096", "max_seq_len=0", "max_model_len 0"),
            ("'max_num_seqs': 128", "'max_num_seqs': -5", "max_num_seqs -5"),
            ("'max_num_seqs': 128", "'max_num_seqs': 0", "max_num_seqs 0"),
            ("'max_num_seqs': 128", "'max_num_seqs': 128, 'block_size': -16", "block_size -16"),
            ("'gpu_memory_utilization': 0.85", "'gpu_memory_utilization': nan", "gpu_memory_utilization NaN: must be in (0, 1]"),
            ("'gpu_memory_utilization': 0.85", "'gpu_memory_utilization': 5.0", "gpu_memory_utilization 5: must be in (0, 1]"),
            ("kv_cache_dtype=fp8_e4m3", "kv_cache_dtype=int2", "kv_cache_dtype int2: allowed: auto"),
            ("119,392 tokens", "-5 tokens", "GPU KV cache size -5"),
            ("119,392 tokens", "123456789012345678901234567 tokens", "GPU KV cache size 123456789012345678901234567"),
            ("119,392 tokens", "1,1,9 tokens", "GPU KV cache size 1,1,9"),
            ("119,392 tokens", "0 tokens", "num_gpu_blocks 0: blocks of 16 tokens"),
            ("119,392 tokens", "9,999,999,999,999 tokens", "at most 100000000 are supported"),
        ];
        for (from, to, note) in cases {
            let log = V1_LOG.replace(from, to);
            assert_ne!(log, V1_LOG, "{from}");
            let s = LoggedServer::read(&log).unwrap();
            let notes = s.notes().join("\n");
            assert!(notes.contains(note) && notes.contains("ignored"), "{to}: {notes}");
            let f = &s.facts;
            let read =
                [f.tensor_parallel_size.is_some(), f.max_model_len.is_some(), f.max_num_seqs.is_some(), f.gpu_memory_utilization.is_some()];
            let field = ["tensor_parallel_size", "max_model_len", "max_num_seqs", "gpu_memory_utilization"]
                .iter()
                .position(|k| note.starts_with(k));
            assert!(field.is_none_or(|i| !read[i]), "{to}: not read");
            assert!(!note.contains("KV cache") || f.num_gpu_blocks.is_none(), "{to}");
        }
    }

    /// A negative or NaN CPU tier size says nothing about offloading (not
    /// `cpu_offload: false`), nor does a cut argument line, whose other
    /// keys are not read either.
    #[test]
    fn an_unreadable_offloading_size_or_a_cut_argument_line_leaves_cpu_offload_unsaid() {
        for size in ["-4", "nan"] {
            let log = format!(
                "INFO non-default args: {{'kv_offloading_size': {size}}}\nINFO Initializing a V1 LLM engine (v0.11.0) with config: model='m'\n"
            );
            let s = LoggedServer::read(&log).unwrap();
            assert_eq!(s.facts.cpu_offload, None, "{size}");
            assert!(s.notes().iter().any(|n| n.starts_with("kv_offloading_size ")), "{:?}", s.notes());
        }
        let cut = V1_LOG.replace("kv_role='kv_both')}", "kv_role='kv_both')");
        let s = LoggedServer::read(&cut).unwrap();
        assert_eq!((s.facts.max_num_seqs, s.facts.cpu_offload, s.facts.tensor_parallel_size), (None, None, Some(2)));
        assert!(s.notes().iter().any(|n| n.contains("closing `}`")), "{:?}", s.notes());
    }

    /// Two different KV cache sizes: the first is read, and a note says so.
    #[test]
    fn two_different_kv_cache_sizes_are_noted() {
        let log = format!("{V1_LOG}INFO GPU KV cache size: 120,000 tokens\n");
        let s = LoggedServer::read(&log).unwrap();
        assert_eq!(s.kv_cache_tokens, Some(119_392));
        assert!(s.notes().iter().any(|n| n.contains("logged as 119392 and later as 120000")), "{:?}", s.notes());
        let same = format!("{V1_LOG}INFO GPU KV cache size: 119,392 tokens\n");
        assert!(!LoggedServer::read(&same).unwrap().notes().iter().any(|n| n.contains("logged as")));
    }

    #[test]
    fn other_text_is_refused() {
        let e = LoggedServer::read("hello\nworld\n").unwrap_err();
        assert!(e.contains("no vLLM startup line"), "{e}");
        assert!(LoggedServer::read("").is_err());
    }
}
