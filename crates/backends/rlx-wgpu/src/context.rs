//! The device: adapter choice, limits, pipeline cache, error capture.
//!
//! One device per process, opened on first use and cached (so is the reason it could not
//! be opened). wgpu reports validation errors through a callback that panics by default;
//! here they are captured and returned as `Err` by whoever submitted the work.

use rlx_ir::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Whether the adapter is a GPU or a software rasterizer (Mesa's lavapipe / llvmpipe,
/// WARP): correct and usable explicitly, never chosen for speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterKind {
    Hardware,
    Software,
}

/// What `rlx info` and the benches print about the device.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    pub name: String,
    pub backend: String,
    pub driver: String,
    pub kind: AdapterKind,
    /// The device runs 64-bit integer kernels (`SHADER_INT64`); without it i64
    /// arithmetic runs as host fallbacks (copies and indices need no i64 type).
    pub int64: bool,
    pub max_binding_bytes: u64,
}

pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: GpuInfo,
    pub limits: wgpu::Limits,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    /// Device copies of host param buffers bound by several programs (a model's weights,
    /// a KV cache shared by its prefill and decode graphs), by buffer identity and
    /// element width; alive while a program holds them.
    shared: Mutex<HashMap<(usize, usize), Weak<wgpu::Buffer>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

static GPU: OnceLock<std::result::Result<Arc<Gpu>, String>> = OnceLock::new();

/// The process's device, opened on first use.
pub(crate) fn gpu() -> Result<Arc<Gpu>> {
    GPU.get_or_init(|| {
        std::panic::catch_unwind(open).unwrap_or_else(|_| Err("wgpu panicked while opening the device".into()))
    })
    .clone()
    .map_err(|why| Error::unsupported(format!("no usable GPU: {why}")))
}

/// The adapter the backend runs on, or why there is none.
pub fn gpu_info() -> Result<GpuInfo> {
    Ok(gpu()?.info.clone())
}

/// Hardware first (discrete, integrated, virtual, other), software last; among equals the
/// first the API lists. `RLX_GPU_ADAPTER` (a substring of the adapter name) overrides.
fn rank(info: &wgpu::AdapterInfo) -> u32 {
    match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn open() -> std::result::Result<Arc<Gpu>, String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY));
    if adapters.is_empty() {
        let icd = std::env::var("VK_ICD_FILENAMES").map(|v| format!(" (VK_ICD_FILENAMES={v})")).unwrap_or_default();
        return Err(format!(
            "wgpu found no Vulkan, Metal or DX12 adapter{icd}; on Linux install a Vulkan driver \
             (mesa-vulkan-drivers for the software one)"
        ));
    }
    if let Ok(wanted) = std::env::var("RLX_GPU_ADAPTER") {
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        adapters.retain(|a| a.get_info().name.to_lowercase().contains(&wanted.to_lowercase()));
        if adapters.is_empty() {
            return Err(format!("RLX_GPU_ADAPTER={wanted} matches none of the adapters {names:?}"));
        }
    }
    adapters.sort_by_key(|a| rank(&a.get_info()));
    let adapter = adapters.swap_remove(0);
    let info = adapter.get_info();
    let features = adapter.features() & wgpu::Features::SHADER_INT64;
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("rlx"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| format!("adapter '{}' refused a device: {e}", info.name))?;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        if let Ok(mut list) = sink.lock() {
            list.push(e.to_string());
        }
    }));
    let kind = if info.device_type == wgpu::DeviceType::Cpu { AdapterKind::Software } else { AdapterKind::Hardware };
    let info = GpuInfo {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        kind,
        int64: features.contains(wgpu::Features::SHADER_INT64),
        max_binding_bytes: limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
    };
    Ok(Arc::new(Gpu {
        device,
        queue,
        info,
        limits,
        pipelines: Mutex::new(HashMap::new()),
        shared: Mutex::new(HashMap::new()),
        errors,
    }))
}

impl Gpu {
    /// The compute pipeline of a WGSL source (entry point `main`), compiled once per
    /// process; a source the device rejects is an internal error quoting it.
    pub fn pipeline(&self, source: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.pipelines.lock().map_err(poisoned)?.get(source) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::internal(format!("gpu: a generated kernel does not compile: {e}\n{source}")));
        }
        let pipeline = Arc::new(pipeline);
        self.pipelines.lock().map_err(poisoned)?.insert(source.to_string(), pipeline.clone());
        Ok(pipeline)
    }

    /// The device buffer standing for host buffer `id` at `elem_bytes` per element:
    /// the live one if a program holds it, else a new one filled by `contents`. The caller
    /// keeps the host buffer alive as long as the device one, so `id` is not reused.
    pub fn shared_buffer(
        &self,
        (id, elem_bytes): (usize, usize),
        label: &str,
        contents: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Arc<wgpu::Buffer>> {
        let mut shared = self.shared.lock().map_err(poisoned)?;
        if let Some(buffer) = shared.get(&(id, elem_bytes)).and_then(Weak::upgrade) {
            return Ok(buffer);
        }
        let bytes = contents()?;
        let buffer = Arc::new(storage_buffer(self, label, bytes.len() as u64));
        self.queue.write_buffer(&buffer, 0, &bytes);
        shared.retain(|_, b| b.strong_count() > 0);
        shared.insert((id, elem_bytes), Arc::downgrade(&buffer));
        Ok(buffer)
    }

    /// Errors the device reported since the last call, as one `Err`.
    pub fn take_errors(&self) -> Result<()> {
        let list = std::mem::take(&mut *self.errors.lock().map_err(poisoned)?);
        if list.is_empty() { Ok(()) } else { Err(Error::runtime(format!("gpu: {}", list.join("; ")))) }
    }

    /// Blocks until the queue is idle.
    pub fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::runtime(format!("gpu: waiting for the queue: {e}")))?;
        self.take_errors()
    }
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> Error {
    Error::internal("gpu: a lock was poisoned by a panic")
}

/// A zeroed buffer kernels read and write and copies reach (`bytes` rounded up to whole
/// words, at least 16).
pub(crate) fn storage_buffer(gpu: &Gpu, label: &str, bytes: u64) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.max(16).next_multiple_of(4),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    })
}
