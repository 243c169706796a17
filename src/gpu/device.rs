//! The WebGPU device through `web-sys` (no wgpu): adapter and device requests with the limits a run needs, the
//! compute pipelines, command encoding, and the allocation tracker through which every buffer is created and
//! destroyed. Errors from JavaScript become a [`GpuError`] here, once.

use super::kernels::Kernel;
use js_sys::Reflect;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{gpu_buffer_usage as usage, gpu_map_mode};

/// Why a measurement could not run or finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuError {
    /// The browser has no WebGPU, or no adapter.
    Unsupported(String),
    /// The adapter's limits are below what the run needs.
    Limits(String),
    /// A buffer could not be allocated (`pushErrorScope('out-of-memory')` reported it).
    OutOfMemory(String),
    /// `device.lost` resolved (destroyed, driver reset, ...).
    DeviceLost(String),
    /// Another measurement is in progress.
    Busy,
    /// A WebGPU validation error: a bug of this page.
    Validation(String),
    /// Anything else JavaScript threw.
    Js(String),
}

impl std::fmt::Display for GpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuError::Unsupported(m) => write!(f, "WebGPU is not available: {m}"),
            GpuError::Limits(m) => write!(f, "this GPU's limits are too small: {m}"),
            GpuError::OutOfMemory(m) => write!(f, "out of GPU memory: {m}"),
            GpuError::DeviceLost(m) => write!(f, "the GPU device was lost: {m}"),
            GpuError::Busy => f.write_str("a measurement is already running"),
            GpuError::Validation(m) => write!(f, "WebGPU validation error: {m}"),
            GpuError::Js(m) => write!(f, "WebGPU call failed: {m}"),
        }
    }
}

/// A JavaScript error value as text.
pub fn js_text(v: &JsValue) -> String {
    if let Some(e) = v.dyn_ref::<js_sys::Error>() {
        return String::from(e.message());
    }
    v.as_string().unwrap_or_else(|| format!("{v:?}"))
}

const STORAGE: u32 = usage::STORAGE | usage::COPY_SRC | usage::COPY_DST;
const UNIFORM: u32 = usage::UNIFORM | usage::COPY_DST;

fn js_err(v: JsValue) -> GpuError {
    GpuError::Js(js_text(&v))
}

/// The phases of a training step, for the tracker's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepPhase {
    /// Resident between steps: model, adapters, optimizer states, batch, kernel parameters.
    Load,
    Forward,
    Backward,
    Optimizer,
}

impl StepPhase {
    pub const ALL: [StepPhase; 4] = [
        StepPhase::Load,
        StepPhase::Forward,
        StepPhase::Backward,
        StepPhase::Optimizer,
    ];
    pub fn label(self) -> &'static str {
        match self {
            StepPhase::Load => "load",
            StepPhase::Forward => "forward",
            StepPhase::Backward => "backward",
            StepPhase::Optimizer => "optimizer",
        }
    }
}

/// One allocation or release, with the live bytes after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub phase: StepPhase,
    pub label: &'static str,
    /// Positive at creation, negative at `destroy()`.
    pub delta: i64,
    pub live: u64,
}

/// A tracked buffer: a plain handle (the `GPUBuffer` itself stays in the tracker). Release it with [`Gpu::free`];
/// whatever is still live at the end is destroyed by [`Gpu::destroy_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buf {
    id: u32,
    pub size: u64,
}

struct Entry {
    buffer: web_sys::GpuBuffer,
    size: u64,
    label: &'static str,
}

/// The allocation tracker: adds a buffer's size at creation, subtracts it at `destroy()`, and records live bytes.
#[derive(Default)]
pub struct Tracker {
    /// Every buffer of the run by id; `None` once destroyed.
    slots: Vec<Option<Entry>>,
    live: u32,
    live_bytes: u64,
    phase: Option<StepPhase>,
    /// Events of the current window (one step), with the live bytes when it opened.
    pub events: Vec<Event>,
    pub window_start: u64,
    /// Peak live bytes of the window, the phase it happened in and the live buffers at that moment.
    pub window_peak: u64,
    pub window_peak_phase: Option<StepPhase>,
    pub window_peak_buffers: Vec<(&'static str, u64)>,
    /// Peak live bytes of each phase in the window (indexed like [`StepPhase::ALL`]).
    pub phase_peak: [u64; 4],
    pub created: u64,
    pub destroyed: u64,
    /// Fault injection for the out-of-memory path (see [`Tracker::set_budget`]); `None` (the default) in every run
    /// of the page.
    budget: Option<u64>,
}

impl Tracker {
    /// Sets a byte budget on the live bytes: a buffer creation that would take them above it fails as a real
    /// out-of-memory does, with [`GpuError::OutOfMemory`], and no buffer is created. It exists because the
    /// out-of-memory path cannot be reached safely on a software adapter (SwiftShader allocates host memory); it is
    /// set only through [`RunOptions::memory_budget`](super::runner::RunOptions::memory_budget), which the page
    /// never sets, and by tests.
    pub fn set_budget(&mut self, budget: Option<u64>) {
        self.budget = budget;
    }
    /// The injected out-of-memory error when a `size` byte buffer would exceed the budget.
    ///
    /// Keep in sync with the real path, [`Gpu::pop_scopes`]: the same [`GpuError::OutOfMemory`] variant, returned
    /// through the same `?` of the caller inside its error scopes, so that the run ends the same way (the runner's
    /// `destroy_all` destroys every buffer). The one difference: a real failure is reported when the scope is
    /// popped, after the (invalid) buffer was counted, whereas this one is reported at creation, as there is no
    /// buffer to hand back.
    fn over_budget(&self, size: u64, label: &str) -> Option<GpuError> {
        let budget = self.budget?;
        let after = self.live_bytes.saturating_add(size);
        (after > budget).then(|| {
            GpuError::OutOfMemory(format!(
                "creating the {size} byte buffer \"{label}\" would raise the live GPU buffers from {} to {after} \
                 bytes, above this run's memory budget of {budget} bytes (out-of-memory injected by the budget)",
                self.live_bytes
            ))
        })
    }
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }
    pub fn live_count(&self) -> u32 {
        self.live
    }
    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flatten()
    }
    /// Sum of the sizes of the live buffers (equals [`Tracker::live_bytes`]; kept separate for the tests).
    pub fn live_sum(&self) -> u64 {
        self.entries().map(|e| e.size).sum()
    }
    /// The live buffers, label and size, in creation order.
    fn snapshot(&self) -> Vec<(&'static str, u64)> {
        self.entries().map(|e| (e.label, e.size)).collect()
    }
    fn phase(&self) -> StepPhase {
        self.phase.unwrap_or(StepPhase::Load)
    }
    fn record(&mut self, label: &'static str, delta: i64) {
        let phase = self.phase();
        self.events.push(Event {
            phase,
            label,
            delta,
            live: self.live_bytes,
        });
        let pi = StepPhase::ALL.iter().position(|p| *p == phase).unwrap_or(0);
        self.phase_peak[pi] = self.phase_peak[pi].max(self.live_bytes);
        if self.live_bytes > self.window_peak {
            self.window_peak = self.live_bytes;
            self.window_peak_phase = Some(phase);
            self.window_peak_buffers = self.snapshot();
        }
    }
    /// Opens a new window (a step): events and peaks start from the current live bytes.
    pub fn open_window(&mut self) {
        self.events.clear();
        self.window_start = self.live_bytes;
        self.window_peak = self.live_bytes;
        self.window_peak_phase = Some(StepPhase::Load);
        self.window_peak_buffers = self.snapshot();
        self.phase_peak = [0; 4];
        self.phase_peak[0] = self.live_bytes;
    }
    pub fn set_phase(&mut self, p: StepPhase) {
        self.phase = Some(p);
        let pi = StepPhase::ALL.iter().position(|x| *x == p).unwrap_or(0);
        self.phase_peak[pi] = self.phase_peak[pi].max(self.live_bytes);
    }
}

/// What adapter the run got.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdapterInfo {
    pub vendor: String,
    pub architecture: String,
    pub description: String,
    pub fallback: bool,
    pub timestamps: bool,
    pub max_buffer: u64,
    pub max_storage_binding: u64,
}

impl AdapterInfo {
    /// One line for the page.
    pub fn summary(&self) -> String {
        let mut s = [&self.vendor, &self.architecture, &self.description]
            .iter()
            .filter(|x| !x.is_empty())
            .map(|x| x.as_str())
            .collect::<Vec<_>>()
            .join(" · ");
        if s.is_empty() {
            s = "unnamed adapter".into();
        }
        if self.fallback {
            s.push_str(
                " (fallback adapter: a software or slow GPU; figures still hold, times do not)",
            );
        }
        s
    }
}

/// Sizes a run needs from the device.
#[derive(Clone, Copy, Debug, Default)]
pub struct Needs {
    /// Largest single buffer.
    pub max_buffer: u64,
    /// Largest buffer bound as storage.
    pub max_storage_binding: u64,
}

/// Spec defaults (what a device has unless more is requested).
const DEFAULT_MAX_BUFFER: u64 = 268_435_456;
const DEFAULT_MAX_STORAGE_BINDING: u64 = 134_217_728;
/// Timestamp queries per window: two per compute pass.
const QUERY_CAPACITY: u32 = 1024;

struct Open {
    encoder: web_sys::GpuCommandEncoder,
    pass: Option<web_sys::GpuComputePassEncoder>,
}

/// A WebGPU device with its pipelines and tracker.
pub struct Gpu {
    pub device: web_sys::GpuDevice,
    queue: web_sys::GpuQueue,
    pipelines: Vec<web_sys::GpuComputePipeline>,
    pub info: AdapterInfo,
    lost: Rc<RefCell<Option<String>>>,
    pub tracker: RefCell<Tracker>,
    open: RefCell<Option<Open>>,
    pending: RefCell<Vec<u32>>,
    uniforms: RefCell<Vec<(Vec<u32>, Buf)>>,
    codes: Cell<Option<Buf>>,
    query_set: Option<web_sys::GpuQuerySet>,
    queries_used: Cell<u32>,
    /// Multiply-add work of the matmuls encoded since the last reset, in FLOPs (2 per multiply-add).
    pub flops: Cell<f64>,
}

fn window() -> Result<web_sys::Window, GpuError> {
    web_sys::window().ok_or_else(|| GpuError::Unsupported("no window".into()))
}

/// `performance.now()` in milliseconds (0 where unavailable).
pub fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map(|p| p.now())
        .unwrap_or(0.0)
}

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// Every kernel's pipeline, and why the first that failed did not compile.
async fn compile_pipelines(
    device: &web_sys::GpuDevice,
) -> (Vec<web_sys::GpuComputePipeline>, Option<String>) {
    // All pipelines are requested at once and compiled concurrently by the browser.
    let pending: Vec<_> = Kernel::ALL
        .iter()
        .map(|k| {
            let module =
                device.create_shader_module(&web_sys::GpuShaderModuleDescriptor::new(k.source()));
            let stage = web_sys::GpuProgrammableStage::new(&module);
            stage.set_entry_point("main");
            let pd = web_sys::GpuComputePipelineDescriptor::new_with_gpu_auto_layout_mode(
                web_sys::GpuAutoLayoutMode::Auto,
                &stage,
            );
            device.create_compute_pipeline_async(&pd)
        })
        .collect();
    let mut pipelines = Vec::with_capacity(pending.len());
    let mut failed = None;
    for (k, p) in Kernel::ALL.iter().zip(pending) {
        match p.await {
            Ok(pipeline) => pipelines.push(pipeline),
            Err(e) => {
                failed.get_or_insert_with(|| {
                    format!("kernel {k:?} did not compile: {}", js_text(&e))
                });
            }
        }
    }
    (pipelines, failed)
}

/// Whether this browser exposes `navigator.gpu` at all.
pub fn webgpu_present() -> bool {
    web_sys::window()
        .map(|w| !get(&w.navigator(), "gpu").is_undefined())
        .unwrap_or(false)
}

impl Gpu {
    /// Requests an adapter and a device with the limits `needs` asks for (above the defaults only when needed,
    /// refused with [`GpuError::Limits`] when the adapter cannot), plus `timestamp-query` when offered.
    pub async fn open(needs: Needs) -> Result<Gpu, GpuError> {
        let nav = window()?.navigator();
        let gpu_js = get(&nav, "gpu");
        if gpu_js.is_undefined() || gpu_js.is_null() {
            return Err(GpuError::Unsupported(
                "this browser has no navigator.gpu".into(),
            ));
        }
        let gpu: web_sys::Gpu = gpu_js.unchecked_into();
        let opts = web_sys::GpuRequestAdapterOptions::new();
        opts.set_power_preference(web_sys::GpuPowerPreference::HighPerformance);
        let adapter = gpu
            .request_adapter_with_options(&opts)
            .await
            .map_err(|e| GpuError::Unsupported(js_text(&e)))?
            .into_option()
            .ok_or_else(|| GpuError::Unsupported("the browser offered no WebGPU adapter".into()))?;
        let limits = adapter.limits();
        let adapter_max_buffer = limits.max_buffer_size() as u64;
        let adapter_max_binding = limits.max_storage_buffer_binding_size() as u64;
        if needs.max_buffer > adapter_max_buffer {
            return Err(GpuError::Limits(format!(
                "the run needs a {} byte buffer; the adapter's maxBufferSize is {adapter_max_buffer}",
                needs.max_buffer
            )));
        }
        if needs.max_storage_binding > adapter_max_binding {
            return Err(GpuError::Limits(format!(
                "the run binds a {} byte storage buffer; the adapter's maxStorageBufferBindingSize is {adapter_max_binding}",
                needs.max_storage_binding
            )));
        }
        let info_js: JsValue = adapter.info().into();
        let text = |k: &str| get(&info_js, k).as_string().unwrap_or_default();
        let fallback = get(&info_js, "isFallbackAdapter")
            .as_bool()
            .unwrap_or(false)
            || get(&adapter, "isFallbackAdapter")
                .as_bool()
                .unwrap_or(false);
        let timestamps = adapter.features().has("timestamp-query");

        let desc = web_sys::GpuDeviceDescriptor::new();
        desc.set_label("peakplan micro QLoRA");
        if timestamps {
            desc.set_required_features(&[js_sys::JsString::from("timestamp-query")]);
        }
        let required = js_sys::Object::new();
        let want = |key: &str, need: u64, default: u64| {
            if need > default {
                let _ = Reflect::set(&required, &key.into(), &JsValue::from_f64(need as f64));
            }
        };
        want("maxBufferSize", needs.max_buffer, DEFAULT_MAX_BUFFER);
        want(
            "maxStorageBufferBindingSize",
            needs.max_storage_binding,
            DEFAULT_MAX_STORAGE_BINDING,
        );
        desc.set_required_limits(required.unchecked_ref());
        let device: web_sys::GpuDevice = adapter
            .request_device_with_descriptor(&desc)
            .await
            .map_err(|e| GpuError::Limits(js_text(&e)))?;

        let lost = Rc::new(RefCell::new(None));
        {
            let lost = lost.clone();
            let promise = device.lost();
            js_sys::futures::spawn_local(async move {
                if let Ok(info) = promise.await {
                    *lost.borrow_mut() = Some(info.message());
                }
            });
        }
        let info = AdapterInfo {
            vendor: text("vendor"),
            architecture: text("architecture"),
            description: text("description"),
            fallback,
            timestamps,
            max_buffer: device.limits().max_buffer_size() as u64,
            max_storage_binding: device.limits().max_storage_buffer_binding_size() as u64,
        };

        device.push_error_scope(web_sys::GpuErrorFilter::Validation);
        let (pipelines, failed) = compile_pipelines(&device).await;
        let query_set = if timestamps {
            device
                .create_query_set(&web_sys::GpuQuerySetDescriptor::new(
                    QUERY_CAPACITY,
                    web_sys::GpuQueryType::Timestamp,
                ))
                .ok()
        } else {
            None
        };
        let compile = match device.pop_error_scope().await {
            Ok(c) => c
                .into_option()
                .map(|e| format!("a kernel did not compile: {}", e.message()))
                .or(failed),
            Err(e) => Some(js_text(&e)),
        };
        if let Some(why) = compile {
            if let Some(qs) = &query_set {
                qs.destroy();
            }
            device.destroy();
            return Err(GpuError::Validation(why));
        }
        let queue = device.queue();
        Ok(Gpu {
            device,
            queue,
            pipelines,
            info,
            lost,
            tracker: RefCell::new(Tracker::default()),
            open: RefCell::new(None),
            pending: RefCell::new(Vec::new()),
            uniforms: RefCell::new(Vec::new()),
            codes: Cell::new(None),
            query_set,
            queries_used: Cell::new(0),
            flops: Cell::new(0.0),
        })
    }

    /// `Err` once `device.lost` has resolved.
    pub fn check(&self) -> Result<(), GpuError> {
        match self.lost.borrow().as_ref() {
            Some(m) => Err(GpuError::DeviceLost(m.clone())),
            None => Ok(()),
        }
    }

    /// Turns a failure into a device-lost error when the device is gone (its `lost` promise may settle a moment
    /// after the call that failed).
    pub async fn classify(&self, e: GpuError) -> GpuError {
        if matches!(e, GpuError::DeviceLost(_) | GpuError::Busy) {
            return e;
        }
        for _ in 0..3 {
            let _ = js_sys::Promise::resolve(&JsValue::UNDEFINED).await;
            if let Err(lost) = self.check() {
                return lost;
            }
        }
        e
    }

    pub fn set_phase(&self, p: StepPhase) -> Result<(), GpuError> {
        self.flush()?;
        self.tracker.borrow_mut().set_phase(p);
        Ok(())
    }

    /// Opens error scopes for out-of-memory and validation errors; [`Gpu::pop_scopes`] closes them.
    pub fn push_scopes(&self) {
        self.device
            .push_error_scope(web_sys::GpuErrorFilter::OutOfMemory);
        self.device
            .push_error_scope(web_sys::GpuErrorFilter::Validation);
    }

    /// Closes the scopes of [`Gpu::push_scopes`]. An error in the out-of-memory scope becomes
    /// [`GpuError::OutOfMemory`] (a memory budget injects the same error at creation: keep `Tracker::over_budget` in
    /// sync with this).
    pub async fn pop_scopes(&self) -> Result<(), GpuError> {
        self.flush()?;
        let validation = self.device.pop_error_scope().await.map_err(js_err)?;
        let oom = self.device.pop_error_scope().await.map_err(js_err)?;
        self.check()?;
        if let Some(e) = oom.into_option() {
            return Err(GpuError::OutOfMemory(e.message()));
        }
        if let Some(e) = validation.into_option() {
            return Err(GpuError::Validation(e.message()));
        }
        Ok(())
    }

    /// Creates a buffer through the tracker (sizes are rounded up to 4 bytes). Buffers released since the last
    /// submission are destroyed first, so that the live bytes never count memory a framework would have reused.
    /// Fails with [`GpuError::OutOfMemory`], creating nothing, when the tracker has a budget the buffer would exceed
    /// ([`Tracker::set_budget`]).
    pub fn alloc_with(
        &self,
        bytes: u64,
        usage_bits: u32,
        label: &'static str,
    ) -> Result<Buf, GpuError> {
        self.check()?;
        if !self.pending.borrow().is_empty() {
            self.flush()?;
        }
        let size = bytes.max(4).div_ceil(4) * 4;
        if let Some(oom) = self.tracker.borrow().over_budget(size, label) {
            return Err(oom);
        }
        let d = web_sys::GpuBufferDescriptor::new_with_f64(size as f64, usage_bits);
        d.set_label(label);
        let buffer = self.device.create_buffer(&d).map_err(js_err)?;
        let mut t = self.tracker.borrow_mut();
        let id = t.slots.len() as u32;
        t.slots.push(Some(Entry {
            buffer,
            size,
            label,
        }));
        t.live += 1;
        t.live_bytes += size;
        t.created += 1;
        t.record(label, size as i64);
        Ok(Buf { id, size })
    }

    /// The `GPUBuffer` of a live handle.
    pub fn raw(&self, b: Buf) -> Result<web_sys::GpuBuffer, GpuError> {
        match self.tracker.borrow().slots.get(b.id as usize) {
            Some(Some(e)) => Ok(e.buffer.clone()),
            _ => Err(GpuError::Js("internal: a released buffer was used".into())),
        }
    }

    fn write(&self, b: Buf, data: &js_sys::Object) -> Result<(), GpuError> {
        self.queue
            .write_buffer_with_u32_and_buffer_source(&self.raw(b)?, 0, data)
            .map_err(js_err)
    }

    /// A storage buffer of `n` f32 (zero-filled, as WebGPU creates them).
    pub fn alloc_f32(&self, n: usize, label: &'static str) -> Result<Buf, GpuError> {
        self.alloc_with(4 * n as u64, STORAGE, label)
    }

    pub fn upload_f32(&self, data: &[f32], label: &'static str) -> Result<Buf, GpuError> {
        let b = self.alloc_f32(data.len(), label)?;
        if !data.is_empty() {
            self.write(b, &js_sys::Float32Array::from(data))?;
        }
        Ok(b)
    }

    pub fn upload_u32(&self, data: &[u32], label: &'static str) -> Result<Buf, GpuError> {
        let b = self.alloc_with(4 * data.len() as u64, STORAGE, label)?;
        if !data.is_empty() {
            self.write(b, &js_sys::Uint32Array::from(data))?;
        }
        Ok(b)
    }

    /// Releases a buffer: it is destroyed (and leaves the live bytes) once the commands that use it are submitted.
    pub fn free(&self, b: Buf) {
        let live = matches!(
            self.tracker.borrow().slots.get(b.id as usize),
            Some(Some(_))
        );
        let mut p = self.pending.borrow_mut();
        if live && !p.contains(&b.id) {
            p.push(b.id);
        }
    }

    pub fn free_opt(&self, b: &mut Option<Buf>) {
        if let Some(b) = b.take() {
            self.free(b);
        }
    }

    fn destroy_id(&self, id: u32) {
        let mut t = self.tracker.borrow_mut();
        if let Some(e) = t.slots.get_mut(id as usize).and_then(Option::take) {
            e.buffer.destroy();
            t.live -= 1;
            t.live_bytes -= e.size;
            t.destroyed += 1;
            t.record(e.label, -(e.size as i64));
        }
    }

    /// Destroys every live buffer (the end of a run, or any failure).
    pub fn destroy_all(&self) {
        self.open.borrow_mut().take();
        self.pending.borrow_mut().clear();
        self.uniforms.borrow_mut().clear();
        self.codes.set(None);
        let n = self.tracker.borrow().slots.len() as u32;
        for id in 0..n {
            self.destroy_id(id);
        }
    }

    /// Ends the open pass, submits the encoded commands and destroys the buffers released meanwhile.
    pub fn flush(&self) -> Result<(), GpuError> {
        if let Some(open) = self.open.borrow_mut().take() {
            if let Some(pass) = open.pass {
                pass.end();
            }
            self.queue.submit(&[open.encoder.finish()]);
        }
        let ids: Vec<u32> = self.pending.borrow_mut().drain(..).collect();
        for id in ids {
            self.destroy_id(id);
        }
        self.check()
    }

    fn encoder(&self) -> std::cell::RefMut<'_, Open> {
        std::cell::RefMut::map(self.open.borrow_mut(), |slot| {
            slot.get_or_insert_with(|| Open {
                encoder: self.device.create_command_encoder(),
                pass: None,
            })
        })
    }

    /// The open command encoder, with any compute pass ended (for copies and query resolves).
    fn outside_pass(&self) -> std::cell::RefMut<'_, Open> {
        let mut open = self.encoder();
        if let Some(pass) = open.pass.take() {
            pass.end();
        }
        open
    }

    fn with_pass<R>(&self, f: impl FnOnce(&web_sys::GpuComputePassEncoder) -> R) -> R {
        let mut open = self.encoder();
        let Open { encoder, pass } = &mut *open;
        let pass = pass.get_or_insert_with(|| match (&self.query_set, self.queries_used.get()) {
            (Some(qs), used) if used + 2 <= QUERY_CAPACITY => {
                // Timestamps at the start and end of every pass; their differences sum to the GPU time.
                let tw = web_sys::GpuComputePassTimestampWrites::new(qs);
                tw.set_beginning_of_pass_write_index(used);
                tw.set_end_of_pass_write_index(used + 1);
                self.queries_used.set(used + 2);
                let pd = web_sys::GpuComputePassDescriptor::new();
                pd.set_timestamp_writes(&tw);
                encoder.begin_compute_pass_with_descriptor(&pd)
            }
            _ => encoder.begin_compute_pass(),
        });
        f(pass)
    }

    /// A uniform block, created once per distinct content and kept until the end of the run.
    pub fn uniform(&self, words: &[u32]) -> Result<Buf, GpuError> {
        if let Some((_, b)) = self
            .uniforms
            .borrow()
            .iter()
            .find(|(w, _)| w.as_slice() == words)
        {
            return Ok(*b);
        }
        let b = self.alloc_with(4 * words.len() as u64, UNIFORM, "kernel parameters")?;
        self.write(b, &js_sys::Uint32Array::from(words))?;
        self.uniforms.borrow_mut().push((words.to_vec(), b));
        Ok(b)
    }

    /// The DYN8 and NF4 tables in one read-only storage buffer (`codes` of the NF4 kernels), made once.
    pub fn codes(&self) -> Result<Buf, GpuError> {
        if let Some(b) = self.codes.get() {
            return Ok(b);
        }
        let mut table: Vec<f32> = peakplan_core::micro::nf4::dynamic_map().to_vec();
        table.extend_from_slice(&peakplan_core::micro::nf4::NF4);
        let b = self.upload_f32(&table, "NF4 and dynamic-map code tables")?;
        self.codes.set(Some(b));
        Ok(b)
    }

    /// Encodes one dispatch of `kernel` with `bufs` bound at 0.. in order, then the parameter block (cached: the
    /// same block serves every dispatch with the same parameters).
    pub fn dispatch(
        &self,
        kernel: Kernel,
        bufs: &[Buf],
        params: &[u32],
        groups: (u32, u32),
    ) -> Result<(), GpuError> {
        let u = self.uniform(params)?;
        self.encode(kernel, bufs, u, groups)
    }

    /// Like [`Gpu::dispatch`] with a parameter block of its own, released after the dispatch (for parameters that
    /// change every step, such as AdamW's bias corrections).
    pub fn dispatch_once(
        &self,
        kernel: Kernel,
        bufs: &[Buf],
        params: &[u32],
        groups: (u32, u32),
    ) -> Result<(), GpuError> {
        let u = self.alloc_with(4 * params.len() as u64, UNIFORM, "step parameters")?;
        let done = self
            .write(u, &js_sys::Uint32Array::from(params))
            .and_then(|_| self.encode(kernel, bufs, u, groups));
        self.free(u);
        done
    }

    fn encode(
        &self,
        kernel: Kernel,
        bufs: &[Buf],
        u: Buf,
        groups: (u32, u32),
    ) -> Result<(), GpuError> {
        let pipeline = &self.pipelines[kernel.index()];
        let mut entries = Vec::with_capacity(bufs.len() + 1);
        for (i, b) in bufs.iter().chain(std::iter::once(&u)).enumerate() {
            let binding = web_sys::GpuBufferBinding::new(&self.raw(*b)?);
            entries.push(web_sys::GpuBindGroupEntry::new_with_gpu_buffer_binding(
                i as u32, &binding,
            ));
        }
        let bg = self
            .device
            .create_bind_group(&web_sys::GpuBindGroupDescriptor::new(
                &entries,
                &pipeline.get_bind_group_layout(0),
            ));
        self.with_pass(|pass| {
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, Some(&bg));
            pass.dispatch_workgroups_with_workgroup_count_y(groups.0.max(1), groups.1.max(1));
        });
        Ok(())
    }

    /// Copies `src` into a new mappable buffer and reads it back (the staging buffer goes through the tracker).
    pub async fn read_words(&self, src: Buf) -> Result<js_sys::ArrayBuffer, GpuError> {
        let staging = self.alloc_with(src.size, usage::MAP_READ | usage::COPY_DST, "readback")?;
        let raw = self.raw(staging)?;
        let copied = self
            .outside_pass()
            .encoder
            .copy_buffer_to_buffer_with_f64_and_f64_and_f64(
                &self.raw(src)?,
                0.0,
                &raw,
                0.0,
                src.size as f64,
            )
            .map_err(js_err);
        let result = match copied.and_then(|_| self.flush()) {
            Ok(()) => match raw.map_async(gpu_map_mode::READ).await {
                Ok(_) => raw.get_mapped_range().map(|r| r.slice(0)).map_err(js_err),
                Err(e) => Err(js_err(e)),
            },
            Err(e) => Err(e),
        };
        if result.is_ok() {
            raw.unmap();
        }
        self.free(staging);
        self.flush()?;
        result
    }

    pub async fn read_f32(&self, src: Buf) -> Result<Vec<f32>, GpuError> {
        let ab = self.read_words(src).await?;
        Ok(js_sys::Float32Array::new(&ab).to_vec())
    }

    /// Waits until the GPU has finished everything submitted.
    pub async fn idle(&self) -> Result<(), GpuError> {
        self.flush()?;
        self.queue.on_submitted_work_done().await.map_err(js_err)?;
        self.check()
    }

    /// Starts a timing window: resets the timestamp queries.
    pub fn reset_timing(&self) {
        self.queries_used.set(0);
        self.flops.set(0.0);
    }

    /// GPU time of the compute passes since [`Gpu::reset_timing`], from timestamp queries (None without them).
    pub async fn gpu_time_ms(&self) -> Result<Option<f64>, GpuError> {
        let (Some(qs), used) = (&self.query_set, self.queries_used.get()) else {
            return Ok(None);
        };
        if used == 0 {
            return Ok(Some(0.0));
        }
        let resolve = self.alloc_with(
            8 * used as u64,
            usage::QUERY_RESOLVE | usage::COPY_SRC,
            "timestamp queries",
        )?;
        let resolved = self.raw(resolve).map(|r| {
            self.outside_pass()
                .encoder
                .resolve_query_set_with_u32(qs, 0, used, &r, 0)
        });
        let read = match resolved {
            Ok(()) => self.read_words(resolve).await,
            Err(e) => Err(e),
        };
        self.free(resolve);
        self.flush()?;
        let buf = read?;
        let stamps = js_sys::BigUint64Array::new(&buf).to_vec();
        let ns: u64 = stamps
            .chunks(2)
            .filter(|c| c.len() == 2 && c[1] >= c[0])
            .map(|c| c[1] - c[0])
            .sum();
        Ok(Some(ns as f64 / 1e6))
    }

    /// Counts a matmul's work for the GFLOP/s figure.
    pub fn count_matmul(&self, m: usize, n: usize, k: usize) {
        self.flops
            .set(self.flops.get() + 2.0 * m as f64 * n as f64 * k as f64);
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        self.destroy_all();
        if let Some(qs) = &self.query_set {
            qs.destroy();
        }
        self.device.destroy();
    }
}
