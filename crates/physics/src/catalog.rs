//! The models and GPUs bundled with BLIS (compiled in from `data/`), so that
//! `blis run` works with no network and no files.

use crate::hardware::{GpuSpec, KernelEfficiency};

/// A bundled HuggingFace `config.json`.
#[derive(Copy, Clone, Debug)]
pub struct BundledModel {
    /// HuggingFace id, e.g. `meta-llama/Llama-3.1-8B-Instruct`.
    pub id: &'static str,
    /// The `config.json` text.
    pub config_json: &'static str,
}

macro_rules! models {
    ($($id:literal),* $(,)?) => {
        &[$(BundledModel { id: $id, config_json: include_str!(concat!("../../../data/models/", $id, ".json")) }),*]
    };
}

/// Every bundled model, sorted by id.
pub const MODELS: &[BundledModel] = models![
    "01-ai/Yi-34B",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-30B-A3B",
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
    "codellama/CodeLlama-34b-Instruct-hf",
    "deepseek-ai/DeepSeek-V2-Lite",
    "meta-llama/Llama-2-70b-chat-hf",
    "meta-llama/Llama-2-70b-hf",
    "meta-llama/Llama-2-7b-chat-hf",
    "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "mistralai/Mistral-Nemo-Instruct-2407",
    "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "mistralai/Mixtral-8x22B-v0.1",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mixtral-8x7B-v0.1",
    "zai-org/GLM-5.2-FP8",
];

/// Finds a bundled model by HuggingFace id or by the part after the `/`,
/// ignoring ASCII case (`meta-llama/llama-3.1-8b-instruct`, `Llama-2-7b-hf`),
/// under its current name or a former one ([`current_model_name`]).
pub fn find_model(name: &str) -> Option<BundledModel> {
    let name = current_model_name(name.trim());
    MODELS
        .iter()
        .copied()
        .find(|m| m.id.eq_ignore_ascii_case(&name) || m.id.rsplit('/').next().is_some_and(|short| short.eq_ignore_ascii_case(&name)))
}

/// Model names HuggingFace has since changed, and what they became; the
/// Hub redirects the former ones, so vLLM serves either.
const RENAMED_MODELS: [(&str, &str); 1] = [("Meta-Llama-3.1-", "Llama-3.1-")];

/// `name` (an id or the part of one after its `/`) under the model's
/// current HuggingFace name: `meta-llama/Meta-Llama-3.1-8B-Instruct` is
/// `meta-llama/Llama-3.1-8B-Instruct`. Other names are returned as they are.
pub fn current_model_name(name: &str) -> String {
    let (org, short) = name.rsplit_once('/').map_or(("", name), |(o, s)| (o, s));
    let renamed = RENAMED_MODELS.iter().find_map(|(former, current)| {
        short.get(..former.len()).filter(|p| p.eq_ignore_ascii_case(former)).map(|_| format!("{current}{}", &short[former.len()..]))
    });
    match (renamed, org) {
        (Some(short), "") => short,
        (Some(short), org) => format!("{org}/{short}"),
        (None, _) => name.to_string(),
    }
}

/// Bundled model ids that contain `name` (or the part of it after the last
/// `/`), ignoring ASCII case: the suggestions for a name [`find_model`]
/// does not know (`llama-3.1-8b` → `meta-llama/Llama-3.1-8B-Instruct`).
pub fn similar_models(name: &str) -> Vec<&'static str> {
    let short = name.trim().rsplit('/').next().unwrap_or_default().to_ascii_lowercase();
    if short.len() < 3 {
        return Vec::new();
    }
    MODELS.iter().map(|m| m.id).filter(|id| id.to_ascii_lowercase().contains(&short)).collect()
}

/// How a GPU board is built, as its names say it: the part of the name
/// that tells two boards of one chip apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FormFactor {
    /// An SXM module on an HGX/DGX board (`SXM`, `SXM4`, `SXM5`).
    Sxm,
    /// A PCIe card (`PCIe`).
    Pcie,
    /// The H100 NVL: a PCIe card with more memory, bridged in pairs (`NVL`).
    Nvl,
}

impl FormFactor {
    fn label(self) -> &'static str {
        match self {
            FormFactor::Sxm => "SXM",
            FormFactor::Pcie => "PCIe",
            FormFactor::Nvl => "NVL",
        }
    }
}

/// A bundled GPU spec.
#[derive(Copy, Clone, Debug)]
pub struct BundledGpu {
    /// Canonical name accepted by `--hardware`.
    pub name: &'static str,
    /// The chip, as the names of every board of it print it: "H100", "A100", "L40S".
    pub family: &'static str,
    /// The board.
    pub form: FormFactor,
    json: &'static str,
}

impl BundledGpu {
    /// The parsed spec. Bundled files are checked by a unit test, so this cannot fail at run time.
    pub fn spec(&self) -> GpuSpec {
        GpuSpec::from_json(self.json).unwrap_or_else(|e| panic!("bundled GPU spec {} is invalid: {e}", self.name))
    }

    /// Memory as names print it, whole GB (the spec's GiB: "80GB" boards hold 80 GiB).
    fn memory_gb(&self) -> u32 {
        self.spec().memory_gib.round() as u32
    }

    /// "A100-80GB (SXM, 80 GB)", for error messages.
    fn describe(&self) -> String {
        format!("{} ({}, {} GB)", self.name, self.form.label(), self.memory_gb())
    }
}

macro_rules! gpus {
    ($($name:literal: $family:literal $form:ident),* $(,)?) => {
        &[$(BundledGpu { name: $name, family: $family, form: FormFactor::$form, json: include_str!(concat!("../../../data/hardware/", $name, ".json")) }),*]
    };
}

/// Every bundled GPU. Within a chip the board a name without form factor
/// or memory means comes first: "A100" is the 80 GB SXM board (the one the
/// kernel profiles measured), "H100" the SXM board. The PCIe cards are
/// parts of their own (other memory, clocks and links), not aliases of
/// the SXM boards.
pub const GPUS: &[BundledGpu] = gpus![
    "H100": "H100" Sxm,
    "A100-80GB": "A100" Sxm,
    "L40S": "L40S" Pcie,
    "A40": "A40" Pcie,
    "H100-NVL": "H100" Nvl,
    "H200": "H200" Sxm,
    "A100-80GB-PCIe": "A100" Pcie,
    "H100-PCIe": "H100" Pcie,
    "A100-40GB": "A100" Sxm,
];

/// The bundled GPUs whose kernels were profiled (`blis kernels`); the
/// others' kernel efficiencies are assumed.
pub const PROFILED_GPUS: [&str; 3] = ["A100-80GB", "A40", "H100"];

/// The kernel efficiencies assumed for a GPU without any: the mean of the
/// [`PROFILED_GPUS`]'. Carried with them, a set's layer time lands within
/// 7 % of a profiled GPU's left out of the mean (`docs/fidelity.md`).
pub fn unprofiled_kernels() -> KernelEfficiency {
    let measured: Vec<KernelEfficiency> = PROFILED_GPUS.iter().filter_map(|n| find_gpu(n)?.spec().kernels).collect();
    let mean = |f: fn(&KernelEfficiency) -> f64| measured.iter().map(f).sum::<f64>() / measured.len() as f64;
    KernelEfficiency {
        gemm_compute: mean(|k| k.gemm_compute),
        gemm_memory: mean(|k| k.gemm_memory),
        layer_overhead_us: mean(|k| k.layer_overhead_us),
        // The engine's unmeasured all-reduce figures are the measured GPUs' mean.
        allreduce_nvlink: None,
        allreduce_pcie: None,
        source: format!("not profiled: the mean of the profiled GPUs ({})", PROFILED_GPUS.join(", ")),
    }
}

/// The bundled model ids, comma-separated, for error messages.
pub fn model_ids() -> String {
    MODELS.iter().map(|m| m.id).collect::<Vec<_>>().join(", ")
}

/// The bundled GPU names, comma-separated, for error messages.
pub fn gpu_names() -> String {
    GPUS.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
}

/// What separates the words of a GPU's name.
const NAME_SEPARATORS: [char; 7] = [' ', '-', '_', '/', '(', ')', ','];

/// What a GPU's name says: its chip, and its board and memory where the
/// name gives them.
#[derive(Debug, PartialEq)]
struct GpuName {
    family: String,
    form: Option<FormFactor>,
    memory_gb: Option<u32>,
}

impl GpuName {
    /// Reads the names `nvidia-smi`, PyTorch, vendor datasheets and
    /// experiment records give one board ("NVIDIA A100-SXM4-80GB",
    /// "NVIDIA H100 80GB HBM3", "H100-SXM-80GB", "L40S-48GB", "a100 80gb
    /// pcie", "H100 (SXM5)"): words split at [`NAME_SEPARATORS`], ignoring
    /// case, a leading "NVIDIA" or "Tesla" and the memory's kind (HBM3, GDDR6).
    /// None for a name with a word it cannot place (a MIG slice, a second
    /// chip), so that no other board is silently taken for the one meant.
    fn parse(name: &str) -> Option<GpuName> {
        let upper = name.to_ascii_uppercase();
        let mut words = upper.split(NAME_SEPARATORS).filter(|w| !w.is_empty()).peekable();
        let (mut family, mut form, mut memory_gb) = (None, None, None);
        while let Some(word) = words.next() {
            let placed = match word {
                "NVIDIA" | "TESLA" if family.is_none() => true,
                "HBM2" | "HBM2E" | "HBM3" | "HBM3E" | "GDDR6" => true,
                "SXM" | "SXM2" | "SXM4" | "SXM5" => form.replace(FormFactor::Sxm).is_none(),
                "PCIE" => form.replace(FormFactor::Pcie).is_none(),
                "NVL" => form.replace(FormFactor::Nvl).is_none(),
                _ => {
                    let gb = match word.strip_suffix("GB").or_else(|| word.strip_suffix('G')) {
                        Some(digits) => digits.parse::<u32>().ok(),
                        // "80 GB": the number, then the unit as a word of its own.
                        None if words.peek() == Some(&"GB") => words.next().and_then(|_| word.parse::<u32>().ok()),
                        None => None,
                    };
                    match gb {
                        Some(gb) => memory_gb.replace(gb).is_none(),
                        None => family.replace(word.to_string()).is_none(),
                    }
                }
            };
            if !placed {
                return None;
            }
        }
        Some(GpuName { family: family?, form, memory_gb })
    }
}

/// Finds a bundled GPU by any name of its board (`GpuName::parse`): the
/// bundled board of the named chip whose form factor and memory agree with
/// what the name gives, the chip's first listed where it gives neither.
pub fn find_gpu(name: &str) -> Option<BundledGpu> {
    let want = GpuName::parse(name)?;
    GPUS.iter()
        .copied()
        .find(|g| g.family == want.family && want.form.is_none_or(|f| f == g.form) && want.memory_gb.is_none_or(|gb| gb == g.memory_gb()))
}

/// Whether two names name the same GPU: the same bundled board
/// ([`find_gpu`]), or, for boards BLIS does not bundle, the same name up
/// to case.
pub fn same_gpu(a: &str, b: &str) -> bool {
    let board = |name: &str| find_gpu(name).map_or_else(|| name.to_ascii_lowercase(), |g| g.name.to_ascii_lowercase());
    board(a) == board(b)
}

/// `gpu` (a spec from a file: a vendor datasheet, a hand-written spec)
/// with what the bundled board of its name knows and the file does not
/// say: the measured kernel efficiencies, the compute capability and the
/// device name, which pick vLLM's kernels (KV block size of latent
/// attention, fused-MoE tiles), and, for the same memory, what CUDA
/// reports of it. A spec of a board BLIS does not bundle is returned as it
/// is.
pub fn completed(mut gpu: GpuSpec) -> GpuSpec {
    if let Some(bundled) = find_gpu(&gpu.name).map(|g| g.spec()) {
        if gpu.memory_gib == bundled.memory_gib {
            gpu.cuda_memory_gib = gpu.cuda_memory_gib.or(bundled.cuda_memory_gib);
        }
        gpu.kernels = gpu.kernels.or(bundled.kernels);
        gpu.compute_capability = gpu.compute_capability.or(bundled.compute_capability);
        gpu.torch_device_name = gpu.torch_device_name.or(bundled.torch_device_name);
    }
    gpu
}

/// Why [`find_gpu`] found no board of `name`, for `--hardware NAME: ...`:
/// the bundled boards of its chip when BLIS has some (an A100 of other
/// memory, an H200 NVL), else every bundled GPU.
pub fn unknown_gpu(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper.split(NAME_SEPARATORS).collect();
    let same_chip: Vec<String> = GPUS.iter().filter(|g| words.contains(&g.family)).map(BundledGpu::describe).collect();
    if same_chip.is_empty() {
        format!("unknown GPU; allowed: {}", gpu_names())
    } else {
        format!("no bundled board of this name; bundled boards of that chip: {}", same_chip.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::{KvSizing, kv_blocks};
    use crate::model::ModelConfig;

    #[test]
    fn similar_models_are_the_bundled_ids_containing_the_name() {
        assert_eq!(similar_models("llama-3.1-8"), ["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct"]);
        assert_eq!(
            similar_models("Meta-Llama/LLAMA-2"),
            ["meta-llama/Llama-2-70b-chat-hf", "meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"]
        );
        assert!(similar_models("gpt-9").is_empty());
        assert!(similar_models("b").is_empty(), "too short to suggest anything");
    }

    /// HuggingFace renamed Meta-Llama-3.1-* to Llama-3.1-*; experiment
    /// records from before use the former name. Llama 3 (not 3.1) kept its
    /// name and is another model.
    #[test]
    fn renamed_models_are_found_under_their_former_names() {
        for former in ["meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama-3.1-8b-instruct", "META-LLAMA/meta-llama-3.1-8b-instruct"] {
            assert_eq!(find_model(former).map(|m| m.id), Some("meta-llama/Llama-3.1-8B-Instruct"), "{former}");
        }
        assert_eq!(find_model("Meta-Llama-3.1-70B-Instruct").map(|m| m.id), Some("meta-llama/Llama-3.1-70B-Instruct"));
        assert_eq!(current_model_name("meta-llama/Meta-Llama-3-8B"), "meta-llama/Meta-Llama-3-8B");
        assert!(find_model("meta-llama/Meta-Llama-3-8B").is_none());
        assert_eq!(current_model_name("é/Meta-Llama"), "é/Meta-Llama", "shorter than the former prefix");
    }

    #[test]
    fn every_bundled_file_parses() {
        for m in MODELS {
            ModelConfig::from_hf_json(m.config_json).unwrap_or_else(|e| panic!("{}: {e}", m.id));
        }
        for g in GPUS {
            g.spec().validate().unwrap();
        }
        for name in PROFILED_GPUS {
            let kernels = find_gpu(name).unwrap().spec().kernels.unwrap_or_else(|| panic!("{name} is profiled"));
            assert!(kernels.source.starts_with("blis kernels"), "{name}: {}", kernels.source);
        }
    }

    /// The all-reduce figures the engine assumes for a GPU nobody measured
    /// are the mean of the bundled GPUs whose collectives were profiled;
    /// and a tensor-parallel group larger than its NVLink domain, or on a
    /// GPU without NVLink, is priced over PCIe, the slower of the two.
    #[test]
    fn unmeasured_all_reduces_get_the_measured_mean_and_groups_past_nvlink_cross_pcie() {
        use crate::hardware::{AllReduceEfficiency, Link, UNMEASURED_NVLINK_ALLREDUCE, UNMEASURED_PCIE_ALLREDUCE};
        let measured: Vec<KernelEfficiency> = ["A100-80GB", "H100"].iter().map(|n| find_gpu(n).unwrap().spec().kernels.unwrap()).collect();
        let mean = |f: fn(&KernelEfficiency) -> Option<AllReduceEfficiency>| {
            let e: Vec<AllReduceEfficiency> = measured.iter().map(|k| f(k).unwrap()).collect();
            let mean = |g: fn(&AllReduceEfficiency) -> f64| e.iter().map(g).sum::<f64>() / 2.0;
            (mean(|a| a.bus_efficiency), mean(|a| a.latency_us), mean(|a| a.hop_latency_us))
        };
        for (unmeasured, (efficiency, latency, hop)) in
            [(UNMEASURED_NVLINK_ALLREDUCE, mean(|k| k.allreduce_nvlink)), (UNMEASURED_PCIE_ALLREDUCE, mean(|k| k.allreduce_pcie))]
        {
            let close = (unmeasured.bus_efficiency - efficiency).abs() < 1e-3
                && (unmeasured.latency_us - latency).abs() < 0.1
                && (unmeasured.hop_latency_us - hop).abs() < 0.01;
            assert!(close, "{unmeasured:?} vs {efficiency}, {latency}, {hop}");
        }
        let (h100, a40, l40s) = (find_gpu("H100").unwrap().spec(), find_gpu("A40").unwrap().spec(), find_gpu("L40S").unwrap().spec());
        assert_eq!([1, 2, 8, 16].map(|tp| h100.allreduce_link(tp)), [Link::NvLink, Link::NvLink, Link::NvLink, Link::Pcie]);
        assert_eq!([2, 4].map(|tp| a40.allreduce_link(tp)), [Link::NvLink, Link::Pcie], "bridged in pairs");
        assert_eq!(l40s.allreduce_link(2), Link::Pcie);
        assert_eq!(l40s.allreduce_bus_bytes_per_s(2), 64e9 * UNMEASURED_PCIE_ALLREDUCE.bus_efficiency);
        assert_eq!(h100.allreduce_latency_scale(4), 1.0);
        assert!(a40.allreduce_latency_scale(4) > 1.3 && l40s.allreduce_latency_scale(2) > 1.3);
        assert!(h100.allreduce_bus_bytes_per_s(4) > 10.0 * l40s.allreduce_bus_bytes_per_s(4));
    }

    /// Peaks are dense figures: FP8 tensor cores do twice the BF16 work
    /// (Hopper, Ada), never the four times a datasheet's sparse FP8 column
    /// over its dense BF16 one gives.
    #[test]
    fn fp8_peaks_are_dense_twice_the_bf16_peak() {
        for g in GPUS {
            let spec = g.spec();
            if let Some(fp8) = spec.fp8_tflops {
                let ratio = fp8 / spec.bf16_tflops;
                assert!((1.99..=2.03).contains(&ratio), "{}: FP8 {fp8} over BF16 {} is {ratio:.2}", g.name, spec.bf16_tflops);
            }
        }
    }

    /// vLLM's batch defaults follow the GPU: the large budget on GPUs of
    /// 70 GiB or more except the A100, the small one on the rest.
    #[test]
    fn batch_defaults_are_vllms_for_each_bundled_gpu() {
        for g in GPUS {
            let d = g.spec().batch_defaults();
            let large = ["H100", "H100-NVL", "H100-PCIe", "H200"].contains(&g.name);
            let want = if large { (1024, 8192) } else { (256, 2048) };
            assert_eq!((d.max_num_seqs, d.max_num_batched_tokens), want, "{}", g.name);
        }
        let a100 = find_gpu("A100-80GB").unwrap().spec();
        assert!(a100.memory_gib >= 70.0, "excluded by name, not by memory");
    }

    /// The PCIe cards' collectives were measured on a box of bridged pairs:
    /// a pair crosses its NVLink bridge, a larger group PCIe, each at the
    /// measured figure; the H100 NVL's bridge is the H100 PCIe card's.
    #[test]
    fn pcie_cards_pair_on_their_bridge_and_ring_over_pcie() {
        use crate::hardware::Link;
        for name in ["A100-80GB-PCIe", "H100-PCIe", "H100-NVL"] {
            let spec = find_gpu(name).unwrap().spec();
            let kernels = spec.kernels.clone().unwrap();
            assert_eq!([2, 4].map(|tp| spec.allreduce_link(tp)), [Link::NvLink, Link::Pcie], "{name}");
            let (bridge, ring) = (kernels.allreduce_nvlink.unwrap(), kernels.allreduce_pcie.unwrap());
            assert_eq!(spec.allreduce_bus_bytes_per_s(2), 600e9 * bridge.bus_efficiency, "{name}");
            assert_eq!(spec.allreduce_bus_bytes_per_s(4), spec.pcie_gb_s * 1e9 * ring.bus_efficiency, "{name}");
        }
        let bridge = |name: &str| find_gpu(name).unwrap().spec().kernels.unwrap().allreduce_nvlink;
        assert_eq!(bridge("H100-NVL"), bridge("H100-PCIe"));
    }

    #[test]
    fn lookup_is_case_insensitive_and_accepts_short_names() {
        assert_eq!(find_model("meta-llama/llama-3.1-8b-instruct").unwrap().id, "meta-llama/Llama-3.1-8B-Instruct");
        assert_eq!(find_model("qwen/qwen2.5-7b-instruct").unwrap().id, "Qwen/Qwen2.5-7B-Instruct");
        assert_eq!(find_model("Llama-2-7b-hf").unwrap().id, "meta-llama/Llama-2-7b-hf");
        assert!(find_model("gpt-5").is_none());
        assert_eq!(find_gpu("h100-sxm-80gb").unwrap().name, "H100");
        assert_eq!(find_gpu("H100 NVL").unwrap().name, "H100-NVL");
        // What nvidia-smi prints, and the spellings of server-facts.yaml.
        assert_eq!(find_gpu("NVIDIA H100 80GB HBM3").unwrap().name, "H100");
        assert_eq!(find_gpu("H100-SXM-80GB").unwrap().name, "H100");
        assert_eq!(find_gpu("NVIDIA H100 NVL").unwrap().name, "H100-NVL");
        assert_eq!(find_gpu("NVIDIA A100 80GB PCIe").unwrap().name, "A100-80GB-PCIe", "as nvidia-smi names it");
        assert_eq!(find_gpu("NVIDIA H100 PCIe").unwrap().name, "H100-PCIe");
        assert_eq!(find_gpu("A100-SXM4-80GB").unwrap().name, "A100-80GB", "the SXM board is another part");
        assert_eq!(find_gpu("NVIDIA A100-SXM4-80GB").unwrap().name, "A100-80GB");
        assert_eq!(find_gpu("nvidia_l40s").unwrap().name, "L40S");
        // The spellings of other experiment records and cloud catalogues.
        for (name, want) in [
            ("L40S-48GB", "L40S"),
            ("L40S PCIe 48GB", "L40S"),
            ("A100-80GB-SXM4", "A100-80GB"),
            ("A100 80G", "A100-80GB"),
            ("a100-sxm4", "A100-80GB"),
            ("A100-SXM4-40GB", "A100-40GB"),
            ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
            ("Tesla A100 40 GB", "A100-40GB"),
            ("H100 SXM5 80GB HBM3", "H100"),
            ("H100 94GB", "H100-NVL"),
            ("NVIDIA H200 141GB HBM3e", "H200"),
            ("A40-48GB", "A40"),
            ("H100 (SXM5, 80GB)", "H100"),
        ] {
            assert_eq!(find_gpu(name).map(|g| g.name), Some(want), "{name}");
        }
        // A different part with a similar name is not silently taken for another.
        for other in [
            "NVIDIA A100 40GB PCIe",
            "H200 NVL",
            "L40",
            "A10",
            "A10G",
            "GH200 480GB",
            "H100 SXM 94GB",
            "L40S SXM",
            "H100 80",
            "H100 PCIe SXM",
        ] {
            assert!(find_gpu(other).is_none(), "{other}");
        }
        for nonsense in ["", "NVIDIA", "80GB", "H100 MIG 1g.10gb", "H100 H200", "A100-80GB, H100"] {
            assert!(find_gpu(nonsense).is_none(), "{nonsense:?}");
        }
    }

    /// Every name a bundled board goes by finds it: its canonical name, the
    /// name in its file and the name PyTorch gives the device (what vLLM
    /// logs and `nvidia-smi` prints).
    #[test]
    fn every_bundled_gpu_is_found_by_each_of_its_names() {
        for g in GPUS {
            let spec = g.spec();
            let device = spec.torch_device_name.clone().unwrap_or_else(|| panic!("{} has a device name", g.name));
            for name in [g.name, spec.name.as_str(), device.as_str()] {
                assert_eq!(find_gpu(name).map(|found| found.name), Some(g.name), "{name}");
            }
        }
    }

    /// A datasheet of a bundled board gets what only BLIS's file says; its
    /// own figures stay; a board BLIS does not bundle gets nothing.
    #[test]
    fn a_datasheet_of_a_bundled_board_is_completed_from_it() {
        let h100 = find_gpu("H100").unwrap().spec();
        let bare = GpuSpec {
            name: "NVIDIA H100 SXM5 80GB".into(),
            kernels: None,
            compute_capability: None,
            torch_device_name: None,
            ..h100.clone()
        };
        let done = completed(bare.clone());
        assert_eq!((done.compute_capability, done.torch_device_name.as_deref()), (Some(9.0), Some("NVIDIA H100 80GB HBM3")));
        assert_eq!(done.kernels, h100.kernels);
        let own = GpuSpec { compute_capability: Some(9.5), ..bare.clone() };
        assert_eq!(completed(own).compute_capability, Some(9.5));
        let other = GpuSpec { name: "B200".into(), ..bare };
        assert_eq!(completed(other.clone()), other);
    }

    /// A 48 GB GDDR6 card (ECC on) hands vLLM 44.52 GiB, not 48 · 0.99025:
    /// its KV budget starts there, a datasheet of the same board learns it
    /// from BLIS's file, one of other memory does not, and an HBM board
    /// keeps the 0.99025 share.
    #[test]
    fn gddr6_cards_budget_the_memory_cuda_reports_with_ecc_on() {
        let (l40s, h100) = (find_gpu("L40S").unwrap().spec(), find_gpu("H100").unwrap().spec());
        let m = ModelConfig::from_hf_json(find_model("meta-llama/Llama-3.1-8B-Instruct").unwrap().config_json).unwrap();
        let budget = |gpu: &GpuSpec| crate::hardware::kv_budget(&m, gpu, &KvSizing::defaults(1, gpu)).unwrap();
        assert_eq!(l40s.cuda_memory_gib, Some(44.52));
        assert!((budget(&l40s).requested_gib - 44.52 * 0.9).abs() < 1e-9, "{:?}", budget(&l40s));
        assert!((budget(&h100).requested_gib - 80.0 * 0.99025 * 0.9).abs() < 1e-9, "{:?}", budget(&h100));
        let sheet = GpuSpec { cuda_memory_gib: None, kernels: None, ..l40s.clone() };
        assert_eq!(budget(&completed(sheet.clone())), budget(&l40s));
        let other = GpuSpec { memory_gib: 24.0, ..sheet };
        assert_eq!(completed(other).cuda_memory_gib, None, "another memory is another board");
        let e = GpuSpec { cuda_memory_gib: Some(50.0), ..l40s }.validate().unwrap_err();
        assert_eq!((e.field, e.reason), ("cuda_memory_gib", "must be a positive number of GiB, at most memory_gib"));
    }

    /// A name of a chip BLIS bundles, but of another board, lists that
    /// chip's boards; any other unknown name, every bundled GPU.
    #[test]
    fn unknown_gpu_names_the_boards_of_the_chip_meant() {
        assert_eq!(
            unknown_gpu("A100 40GB PCIe"),
            "no bundled board of this name; bundled boards of that chip: A100-80GB (SXM, 80 GB), A100-80GB-PCIe (PCIe, 80 GB), A100-40GB (SXM, 40 GB)"
        );
        assert!(unknown_gpu("NVIDIA H200 NVL").ends_with("H200 (SXM, 141 GB)"));
        assert_eq!(unknown_gpu("B200"), format!("unknown GPU; allowed: {}", gpu_names()));
    }

    #[test]
    fn kv_capacity_is_close_to_what_real_servers_reported() {
        // (model, tp, blocks the H100 servers in validation/ reported; they ran
        // with utilisation 0.9, 16-token blocks, 2048 batched tokens, 128 sequences)
        let h100 = find_gpu("H100").unwrap().spec();
        for (id, tp, reported) in [
            ("meta-llama/Llama-2-7b-hf", 1, 7462.0),
            ("meta-llama/Llama-2-70b-hf", 4, 31356.0),
            ("mistralai/Mixtral-8x7B-v0.1", 2, 27510.0),
        ] {
            let m = ModelConfig::from_hf_json(find_model(id).unwrap().config_json).unwrap();
            let sizing = KvSizing { max_num_batched_tokens: 2048, max_num_seqs: 128, ..KvSizing::defaults(tp, &h100) };
            let blocks = kv_blocks(&m, &h100, &sizing).unwrap() as f64;
            let err = (blocks - reported) / reported;
            assert!(err.abs() <= 0.005, "{id}: {blocks} vs {reported} ({:.2}%)", err * 100.0);
        }
    }
}
