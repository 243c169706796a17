//! The measurement: open a device, upload the micro model, run K training steps on a fixed batch, and report the
//! loss of each step, the peak GPU buffer memory of a step with its live-bytes timeline, the step time, and the
//! fused vs unfused dequantization difference for one layer. One measurement at a time; every path out of a run,
//! failures included, destroys what the run allocated.

use super::device::{now_ms, AdapterInfo, Event, Gpu, GpuError, Needs, StepPhase};
use super::step::{run_step, Capture, Resident, StepEncoder};
use peakplan_core::micro::{
    Batch, MicroAttention, MicroConfig, MicroLoss, MicroModel, Rng, PROJECTIONS,
};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// Where a run is, for progress display and tests.
pub struct Progress<'a> {
    /// 1-based step.
    pub step: u32,
    pub steps: u32,
    pub phase: StepPhase,
    pub device: &'a web_sys::GpuDevice,
}

/// Called as each phase of each step starts.
pub type OnProgress = Rc<dyn Fn(&Progress)>;

/// How to run a measurement.
#[derive(Clone)]
pub struct RunOptions {
    pub steps: u32,
    /// Fused dequantize-matmul in the training step (the unfused path exists for the comparison and tests).
    pub fused: bool,
    /// Also compare fused and unfused dequantization on one layer.
    pub compare_dequant: bool,
    /// Read back the first step's gradients and updated adapters (for checks against the CPU reference).
    pub capture: bool,
    pub on_progress: Option<OnProgress>,
    /// Fault injection for tests of the out-of-memory path: a byte budget on the tracker's live bytes, above which a
    /// buffer creation fails with [`GpuError::OutOfMemory`] as when the browser's out-of-memory error scope reports
    /// one (see `Tracker::set_budget`). `None` by default, and never set by the page.
    pub memory_budget: Option<u64>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            steps: 5,
            fused: true,
            compare_dequant: true,
            capture: false,
            on_progress: None,
            memory_budget: None,
        }
    }
}

/// Fused vs unfused dequantization of the seven projections of one layer (forward).
#[derive(Clone, Debug, PartialEq)]
pub struct DequantComparison {
    /// Peak bytes allocated above the resident set while running the seven base matmuls.
    pub fused_bytes: u64,
    pub unfused_bytes: u64,
    pub fused_ms: f64,
    pub unfused_ms: f64,
}

/// The tracker's record of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRecord {
    pub loss: f32,
    /// Live bytes when the step began (the load phase).
    pub load_bytes: u64,
    /// Peak live bytes during the step.
    pub peak_bytes: u64,
    pub peak_phase: StepPhase,
    /// The buffers live at the peak: label and size. Their sum is `peak_bytes`.
    pub peak_buffers: Vec<(&'static str, u64)>,
    /// Peak live bytes of each phase, indexed like [`StepPhase::ALL`].
    pub phase_peaks: [u64; 4],
    pub timeline: Vec<Event>,
    pub wall_ms: f64,
    pub gpu_ms: Option<f64>,
    pub flops: f64,
}

/// What a measurement found.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub config: MicroConfig,
    pub adapter: AdapterInfo,
    pub steps: Vec<StepRecord>,
    /// Peak GPU buffer memory of a step (the last one; every step after the first has the same schedule).
    pub peak_bytes: u64,
    pub dequant: Option<DequantComparison>,
    pub capture: Option<Capture>,
    /// Buffers created and destroyed over the run (equal once the run is over).
    pub created: u64,
    pub destroyed: u64,
}

impl Measurement {
    pub fn losses(&self) -> Vec<f32> {
        self.steps.iter().map(|s| s.loss).collect()
    }
    pub fn last(&self) -> Option<&StepRecord> {
        self.steps.last()
    }
    /// Step time of the last step: GPU time from timestamp queries when the adapter has them, else wall time.
    pub fn step_ms(&self) -> f64 {
        self.last()
            .map(|s| s.gpu_ms.filter(|g| *g > 0.0).unwrap_or(s.wall_ms))
            .unwrap_or(0.0)
    }
    pub fn step_time_source(&self) -> &'static str {
        match self.last().and_then(|s| s.gpu_ms) {
            Some(g) if g > 0.0 => "GPU timestamp queries",
            _ => "performance.now() around the submitted and awaited step",
        }
    }
    /// Effective GFLOP/s of the matmuls (their multiply-adds over the step time).
    pub fn gflops(&self) -> f64 {
        match (self.last(), self.step_ms()) {
            (Some(s), ms) if ms > 0.0 => s.flops / (ms * 1e6),
            _ => 0.0,
        }
    }
}

thread_local! {
    static RUNNING: Cell<bool> = const { Cell::new(false) };
    static LEFTOVER: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Held while a measurement runs; refuses a second one.
struct RunGuard;

impl RunGuard {
    fn acquire() -> Result<RunGuard, GpuError> {
        RUNNING.with(|r| {
            if r.get() {
                Err(GpuError::Busy)
            } else {
                r.set(true);
                Ok(RunGuard)
            }
        })
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(false));
    }
}

/// Whether a measurement is running now.
pub fn is_running() -> bool {
    RUNNING.with(|r| r.get())
}

/// Live bytes the tracker still held after the last run's cleanup (0 when everything was destroyed; `None` when the
/// last run never got a device, or before any run).
pub fn last_run_leftover() -> Option<u64> {
    LEFTOVER.with(|l| l.get())
}

/// The largest buffers a run makes, for the device limits.
pub fn needs(cfg: &MicroConfig) -> Needs {
    let (n, h, v) = (cfg.tokens() as u64, cfg.hidden as u64, cfg.vocab as u64);
    let logits = match cfg.loss {
        MicroLoss::Whole => n * v,
        MicroLoss::Chunked(_) => cfg.loss_chunk() as u64 * v,
    };
    let probs = match cfg.attention {
        MicroAttention::Eager => (cfg.batch * cfg.heads * cfg.seq * cfg.seq) as u64,
        MicroAttention::Tiled => 0,
    };
    let (mut dense, mut widest) = (0u64, 0u64);
    for t in PROJECTIONS {
        let (i, o) = cfg.proj_shape(t);
        dense = dense.max((i * o) as u64);
        widest = widest.max(i as u64);
    }
    let biggest = 4 * [
        v * h,
        logits,
        probs,
        n * cfg.intermediate as u64,
        dense,
        n * widest,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    Needs {
        max_buffer: biggest,
        max_storage_binding: biggest,
    }
}

/// Starts a measurement of the micro run `cfg` (its model and batch from the seed). Refused at once with
/// [`GpuError::Busy`] while another one runs.
pub fn measure(
    cfg: MicroConfig,
    opts: RunOptions,
) -> Result<impl Future<Output = Result<Measurement, GpuError>>, GpuError> {
    let guard = RunGuard::acquire()?;
    Ok(async move {
        let _guard = guard;
        let model = MicroModel::new(&cfg).map_err(GpuError::Limits)?;
        let batch = model.batch();
        run(model, batch, opts).await
    })
}

/// Starts a measurement of a given model and batch (tests set the adapters themselves).
pub fn measure_model(
    model: MicroModel,
    batch: Batch,
    opts: RunOptions,
) -> Result<impl Future<Output = Result<Measurement, GpuError>>, GpuError> {
    let guard = RunGuard::acquire()?;
    Ok(async move {
        let _guard = guard;
        run(model, batch, opts).await
    })
}

/// A future behind a pointer and a vtable, for the run's big stages (opening the device, the run, each step, the
/// dequantization comparison): each keeps its own poll function instead of being inlined into one state machine
/// that holds them all, which makes the page's wasm 0.4 KB gzipped smaller (boxing the small helpers, such as
/// `idle`, or the whole run made it larger). One allocation per stage, next to a GPU step's milliseconds.
fn boxed<'a, T>(f: impl Future<Output = T> + 'a) -> Pin<Box<dyn Future<Output = T> + 'a>> {
    Box::pin(f)
}

async fn run(model: MicroModel, batch: Batch, opts: RunOptions) -> Result<Measurement, GpuError> {
    LEFTOVER.with(|l| l.set(None));
    model.cfg.validate().map_err(GpuError::Limits)?;
    let gpu = boxed(Gpu::open(needs(&model.cfg))).await?;
    gpu.tracker.borrow_mut().set_budget(opts.memory_budget);
    let result = match boxed(run_on(&gpu, &model, &batch, &opts)).await {
        Ok(m) => Ok(m),
        Err(e) => Err(gpu.classify(e).await),
    };
    gpu.destroy_all();
    let (live, created, destroyed) = {
        let t = gpu.tracker.borrow();
        (t.live_bytes(), t.created, t.destroyed)
    };
    LEFTOVER.with(|l| l.set(Some(live)));
    drop(gpu);
    result.map(|mut m| {
        m.created = created;
        m.destroyed = destroyed;
        m
    })
}

async fn run_on(
    gpu: &Gpu,
    model: &MicroModel,
    batch: &Batch,
    opts: &RunOptions,
) -> Result<Measurement, GpuError> {
    let cfg = &model.cfg;
    gpu.push_scopes();
    let uploaded = Resident::upload(gpu, model, batch);
    gpu.pop_scopes().await?;
    let res = uploaded?;
    let encoder = StepEncoder {
        gpu,
        cfg,
        res: &res,
        fused: opts.fused,
    };
    let steps = opts.steps.max(1);
    let mut records = Vec::with_capacity(steps as usize);
    let mut capture = None;
    for step in 1..=steps {
        gpu.idle().await?;
        gpu.tracker.borrow_mut().open_window();
        gpu.reset_timing();
        let t0 = now_ms();
        let progress = |phase: StepPhase, device: &web_sys::GpuDevice| {
            if let Some(cb) = &opts.on_progress {
                cb(&Progress {
                    step,
                    steps,
                    phase,
                    device,
                });
            }
        };
        let cap = boxed(run_step(&encoder, opts.capture && step == 1, &progress)).await?;
        gpu.idle().await?;
        let wall_ms = now_ms() - t0;
        let flops = gpu.flops.get();
        let mut rec = {
            let t = gpu.tracker.borrow();
            StepRecord {
                loss: f32::NAN,
                load_bytes: t.window_start,
                peak_bytes: t.window_peak,
                peak_phase: t.window_peak_phase.unwrap_or(StepPhase::Load),
                peak_buffers: t.window_peak_buffers.clone(),
                phase_peaks: t.phase_peak,
                timeline: t.events.clone(),
                wall_ms,
                gpu_ms: None,
                flops,
            }
        };
        rec.gpu_ms = gpu.gpu_time_ms().await?;
        rec.loss = gpu
            .read_f32(res.loss)
            .await?
            .first()
            .copied()
            .unwrap_or(f32::NAN);
        if cap.is_some() {
            capture = cap;
        }
        records.push(rec);
    }
    let dequant = if opts.compare_dequant {
        Some(boxed(compare_dequant(&encoder)).await?)
    } else {
        None
    };
    let peak_bytes = records.last().map(|r| r.peak_bytes).unwrap_or(0);
    Ok(Measurement {
        config: cfg.clone(),
        adapter: gpu.info.clone(),
        steps: records,
        peak_bytes,
        dequant,
        capture,
        created: 0,
        destroyed: 0,
    })
}

/// Runs the seven base projections of layer 0 forward, fused then unfused, and measures the bytes each path
/// allocates above the resident set and its time.
async fn compare_dequant(encoder: &StepEncoder<'_>) -> Result<DequantComparison, GpuError> {
    let (gpu, cfg) = (encoder.gpu, encoder.cfg);
    let n = cfg.tokens();
    let widest = PROJECTIONS
        .iter()
        .map(|t| cfg.proj_shape(*t).0)
        .max()
        .unwrap_or(cfg.hidden);
    let mut rng = Rng::new(cfg.seed ^ 0x00d3_9a17);
    let x = gpu.upload_f32(&rng.fill(n * widest, 1.0), "comparison input")?;
    let Some(layer) = encoder.res.layers.first() else {
        gpu.free(x);
        return Err(GpuError::Js("internal: no layer".into()));
    };
    let mut out = [(0u64, f64::INFINITY); 2];
    // A first run of each path compiles its kernels and makes its parameter blocks; then the two paths alternate,
    // three runs each, and each keeps its fastest: on a shared machine the minimum is the run least disturbed.
    let order = [true, false, true, false, true, false, true, false];
    for (i, fused) in order.into_iter().enumerate() {
        let c = StepEncoder {
            gpu,
            cfg,
            res: encoder.res,
            fused,
        };
        gpu.idle().await?;
        gpu.tracker.borrow_mut().open_window();
        gpu.reset_timing();
        let base = gpu.tracker.borrow().live_bytes();
        let t0 = now_ms();
        gpu.push_scopes();
        let mut r = Ok(());
        for p in &layer.proj {
            r = gpu
                .alloc_f32(n * p.rows, "comparison output")
                .and_then(|y| {
                    let done = c.base_fwd(n, &x, p, &y, 0.0);
                    gpu.free(y);
                    done
                });
            if r.is_err() {
                break;
            }
        }
        gpu.pop_scopes().await?;
        r?;
        gpu.idle().await?;
        let wall = now_ms() - t0;
        let ms = gpu
            .gpu_time_ms()
            .await?
            .filter(|g| *g > 0.0)
            .unwrap_or(wall);
        if i >= 2 {
            let slot = &mut out[usize::from(!fused)];
            slot.0 = gpu.tracker.borrow().window_peak.saturating_sub(base);
            slot.1 = slot.1.min(ms);
        }
    }
    gpu.free(x);
    gpu.flush()?;
    Ok(DequantComparison {
        fused_bytes: out[0].0,
        unfused_bytes: out[1].0,
        fused_ms: out[0].1,
        unfused_ms: out[1].1,
    })
}
