//! The KV tiers below the GPU a scenario asks for: vLLM's CPU offloading
//! flags (`--kv-offloading-size`, `--kv-cpu-blocks`,
//! `--kv-offloading-backend`) and the `kv_tiers` list of CPU, disk and
//! remote tiers (LMCache's `local_cpu`, `local_disk` and `remote_url`),
//! resolved to the engine's [`OffloadConfig`].
//!
//! How `kv_tiers` is written: [`crate::tier_list`].

use blis_engine::kv::offload::{LMCACHE_CHUNK_TOKENS, LinkConfig, Medium, OffloadConfig, StorePolicy, TierConfig};
use blis_engine::time::{Micros, parse_duration};
use blis_physics::hardware::GpuSpec;
use blis_physics::latency::physics_normalized::PCIE_EFFICIENCY;
use blis_physics::model::ModelConfig;

use crate::error::{ScenarioError, invalid};
use crate::knobs::{ConfigReport, Knobs, Source, report_entry};

/// Fixed cost of one GPU ↔ host transfer (a copy's launch and completion).
const DEFAULT_TRANSFER_LATENCY: Micros = Micros(20);

/// The link of a disk tier whose entry names none: bandwidth per direction,
/// GB/s, for the whole instance, and the fixed cost of one transfer. One
/// PCIe 4.0 ×4 NVMe drive, which writes at about 4–5 GB/s and reads at
/// about 7 (vendor sheets, e.g. Samsung PM9A3).
const DISK_LINK: (f64, Micros) = (5.0, Micros(100));

/// The same for a remote tier: a 100 Gb/s NIC (12.5 GB/s) and a store a
/// fraction of a millisecond away (LMCache's remote backends: Redis,
/// Mooncake, …).
const REMOTE_LINK: (f64, Micros) = (12.5, Micros(500));

/// The largest KV tier, GiB: a PiB (about a million GiB), beyond any host
/// memory, disk or store one instance offloads to; larger sizes are typos
/// (`1e30`), which would otherwise saturate the block count.
pub const MAX_TIER_GIB: f64 = 1e6;

/// The store policy `--kv-offloading-backend` names.
fn backend(k: &Knobs, tiers: &[TierConfig], block_size: u32, report: &mut ConfigReport) -> Result<StorePolicy, ScenarioError> {
    let lmcache = StorePolicy::PromptChunks { chunk_blocks: (LMCACHE_CHUNK_TOKENS / block_size).max(1) };
    let below_host = tiers.iter().any(|t| t.medium != Medium::Cpu);
    match k.kv_offloading_backend.value.as_deref() {
        None if below_host => {
            report_entry(report, "kv-offloading-backend", &"lmcache", Source::Derived);
            Ok(lmcache)
        }
        None | Some("native") if below_host => Err(invalid!(
            knob: kv_offloading_backend,
            "native (vLLM's OffloadingConnector) keeps KV in host memory only; disk and remote tiers need --kv-offloading-backend lmcache"
        )),
        None | Some("native") => Ok(StorePolicy::EveryFullBlock),
        Some("lmcache") => Ok(lmcache),
        Some(other) => Err(invalid!(knob: kv_offloading_backend, "`{other}`: allowed values are native, lmcache")),
    }
}

/// A capacity in blocks: `blocks`, or `gib` of blocks of `block_bytes`
/// (all shards); the error says what is wrong with them.
fn capacity_blocks(blocks: Option<u64>, gib: Option<f64>, block_bytes: f64) -> Result<u64, String> {
    match (blocks, gib) {
        (Some(_), Some(_)) => Err("give a size in GiB or in blocks, not both".into()),
        (None, None) => Err("needs a size (size_gib or blocks)".into()),
        (Some(0), None) => Err("0 blocks; a tier needs at least one block".into()),
        (Some(n), None) => Ok(n),
        (None, Some(gib)) => {
            if !(gib.is_finite() && gib > 0.0) {
                return Err(format!("size {gib:?} GiB must be a positive number"));
            }
            if gib > MAX_TIER_GIB {
                return Err(format!("size {gib:e} GiB: must be at most {MAX_TIER_GIB:e} GiB (a PiB)"));
            }
            let n = (gib * (1u64 << 30) as f64 / block_bytes).floor();
            if n < 1.0 {
                return Err(format!("{gib} GiB holds less than one KV block ({:.1} MiB)", block_bytes / (1u64 << 20) as f64));
            }
            Ok(n as u64)
        }
    }
}

/// A link bandwidth in GB/s, in [10⁻⁶, 10⁶] (a kB/s to a PB/s: slower
/// links would push transfers past the simulated clock's span); the error
/// follows the value's name.
pub(crate) fn bandwidth(gb_per_s: f64) -> Result<f64, String> {
    if gb_per_s.is_finite() && (1e-6..=1e6).contains(&gb_per_s) {
        Ok(gb_per_s)
    } else {
        Err(format!("{gb_per_s:?}: must be a number of GB/s in [1e-6, 1e6]"))
    }
}

/// The tiers the knobs ask for, if any, for `model` on `tp` GPUs of `gpu`
/// with blocks of `block_size` tokens; derived values go to `report`.
pub fn resolve(
    k: &Knobs,
    model: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
    block_size: u32,
    report: &mut ConfigReport,
) -> Result<Option<OffloadConfig>, ScenarioError> {
    let block_bytes_per_gpu = model.kv_bytes_per_token_per_gpu(tp) * f64::from(block_size);
    // vLLM (CPUOffloadingSpec) and these sizes count every GPU's shard of a block.
    let block_bytes = block_bytes_per_gpu * f64::from(tp);
    let mut tiers = Vec::new();
    let cpu_by_flag = k.kv_cpu_blocks.value.is_some() || k.kv_offloading_size.value.is_some();
    match (k.kv_cpu_blocks.value, k.kv_offloading_size.value) {
        (Some(_), Some(_)) => return Err(invalid!("give either --kv-cpu-blocks or --kv-offloading-size, not both")),
        (Some(0), None) => return Err(invalid!(knob: kv_cpu_blocks, "0: the CPU tier needs at least one block")),
        (Some(n), None) => tiers.push(TierConfig { medium: Medium::Cpu, blocks: n, link: None }),
        (None, Some(gib)) => {
            if !(gib.is_finite() && gib > 0.0) {
                return Err(invalid!(knob: kv_offloading_size, "{gib:?}: must be a positive number of GiB"));
            }
            if gib > MAX_TIER_GIB {
                return Err(invalid!(knob: kv_offloading_size, "{gib:e}: must be at most {MAX_TIER_GIB:e} GiB (a PiB of host memory)"));
            }
            let blocks = capacity_blocks(None, Some(gib), block_bytes).map_err(|_| {
                invalid!(
                    knob: kv_offloading_size,
                    "{gib} GiB holds less than one KV block ({:.1} MiB at TP {tp} and --block-size {block_size})",
                    block_bytes / (1u64 << 20) as f64
                )
            })?;
            report_entry(report, "kv-cpu-blocks", &blocks, Source::Derived);
            tiers.push(TierConfig { medium: Medium::Cpu, blocks, link: None });
        }
        (None, None) => {}
    }
    for (i, spec) in k.kv_tiers.value.iter().flat_map(|l| &l.0).enumerate() {
        let what = format!("entry {} ({})", i + 1, spec.medium);
        let medium = Medium::parse(&spec.medium).ok_or_else(
            || invalid!(knob: kv_tiers, "entry {}: medium `{}`: allowed values are {}", i + 1, spec.medium, Medium::NAMES.join(", ")),
        )?;
        if medium == Medium::Cpu && cpu_by_flag {
            return Err(invalid!(knob: kv_tiers, "{what}: the CPU tier is given twice (also by --kv-offloading-size or --kv-cpu-blocks)"));
        }
        let blocks = capacity_blocks(spec.blocks, spec.size_gib, block_bytes).map_err(|m| invalid!(knob: kv_tiers, "{what}: {m}"))?;
        let link = match medium {
            Medium::Cpu if spec.bandwidth_gb_s.is_some() || spec.latency.is_some() => {
                return Err(invalid!(
                    knob: kv_tiers,
                    "{what}: the CPU tier's link is the GPU's PCIe; set it with --kv-transfer-bandwidth and --kv-transfer-latency"
                ));
            }
            Medium::Cpu => None,
            Medium::Disk | Medium::Remote => {
                let (default_gb_s, default_latency) = if medium == Medium::Disk { DISK_LINK } else { REMOTE_LINK };
                let gb_per_s = bandwidth(spec.bandwidth_gb_s.unwrap_or(default_gb_s))
                    .map_err(|m| invalid!(knob: kv_tiers, "{what}: bandwidth_gb_s {m}"))?;
                let latency = match &spec.latency {
                    Some(text) => parse_duration(text).map_err(|e| invalid!(knob: kv_tiers, "{what}: latency {e}"))?,
                    None => default_latency,
                };
                // The node's disk or NIC serves every GPU's shard at once.
                Some(LinkConfig { bytes_per_s: gb_per_s * 1e9 / f64::from(tp), latency })
            }
        };
        tiers.push(TierConfig { medium, blocks, link });
    }
    if tiers.is_empty() {
        let link_knobs =
            [k.kv_transfer_bandwidth.value.is_some(), k.kv_transfer_latency.value.is_some(), k.kv_offloading_backend.value.is_some()];
        if link_knobs[..2].iter().any(|&given| given) {
            return Err(invalid!(
                knob: kv_transfer_bandwidth,
                "and --kv-transfer-latency set the KV offloading link (GPU ↔ host) and need a tier (--kv-offloading-size GIB, --kv-cpu-blocks N or --kv-tiers); the prefill → decode link of a disaggregated deployment is --pd-transfer-bandwidth / --pd-transfer-latency"
            ));
        }
        if link_knobs[2] {
            return Err(invalid!("KV offloading flags need a tier: give --kv-offloading-size GIB, --kv-cpu-blocks N or --kv-tiers"));
        }
        return Ok(None);
    }
    let policy = backend(k, &tiers, block_size, report)?;
    let gb_per_s = match k.kv_transfer_bandwidth.value {
        Some(b) => bandwidth(b).map_err(|m| invalid!(knob: kv_transfer_bandwidth, "{m}"))?,
        None => {
            // The spec's figure counts both directions; offload copies get
            // the share of it the physics-normalized model assumes.
            let b = gpu.pcie_gb_s / 2.0 * PCIE_EFFICIENCY;
            report_entry(report, "kv-transfer-bandwidth", &b, Source::Derived);
            b
        }
    };
    let latency = match &k.kv_transfer_latency.value {
        Some(text) => parse_duration(text).map_err(|e| invalid!(knob: kv_transfer_latency, "{e}"))?,
        None => DEFAULT_TRANSFER_LATENCY,
    };
    let link = LinkConfig { bytes_per_s: gb_per_s * 1e9, latency };
    let o = OffloadConfig { policy, block_bytes: block_bytes_per_gpu.ceil() as u64, store: link, load: link, tiers };
    o.validate().map_err(|e| invalid!("KV tiers: {e}"))?;
    Ok(Some(o))
}
