//! Thin wrappers over browser APIs (URL, clipboard, downloads, theme, timing, and `fetch_text`: the Hub request,
//! timed out and capped while read); errors become `Option`/messages once here.

use wasm_bindgen::JsCast;

fn window() -> Option<web_sys::Window> {
    web_sys::window()
}

/// The page's query string, without `?`.
pub fn query() -> String {
    window()
        .and_then(|w| w.location().search().ok())
        .unwrap_or_default()
        .trim_start_matches('?')
        .to_string()
}

/// Whether the page runs inside another page's frame (`window.top` is not this window). A framed planner shows
/// only the chart: the full page has inputs (the Hub token among them) that a page framing it invisibly could
/// trick a reader into using, and static hosts such as GitHub Pages cannot send `frame-ancestors`.
pub fn framed() -> bool {
    let Some(w) = window() else {
        return false;
    };
    match w.top() {
        Ok(Some(top)) => wasm_bindgen::JsValue::from(top) != wasm_bindgen::JsValue::from(w),
        // A detached page has no top; a top the page may not read is another page's.
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Writes the URL's query: a new history entry when `push`, else in place.
pub fn write_query(query: &str, push: bool) {
    let Some(w) = window() else { return };
    let path = w.location().pathname().unwrap_or_default();
    let url = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    if let Ok(h) = w.history() {
        let state = &wasm_bindgen::JsValue::NULL;
        let _ = if push {
            h.push_state_with_url(state, "", Some(&url))
        } else {
            h.replace_state_with_url(state, "", Some(&url))
        };
    }
}

/// The absolute URL of this page with a given query.
pub fn url_with_query(query: &str) -> String {
    let Some(w) = window() else {
        return String::new();
    };
    let loc = w.location();
    let origin = loc.origin().unwrap_or_default();
    let path = loc.pathname().unwrap_or_default();
    format!("{origin}{path}?{query}")
}

/// Copies text to the clipboard; the promise's outcome is not awaited (the button shows the text either way).
pub fn copy(text: &str) {
    if let Some(w) = window() {
        let _ = w.navigator().clipboard().write_text(text);
    }
}

/// Offers `content` as a file download.
pub fn download(filename: &str, mime: &str, content: &str) -> Result<(), String> {
    let w = window().ok_or("no window")?;
    let doc = w.document().ok_or("no document")?;
    let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(content));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts)
        .map_err(|_| "cannot make the file")?;
    let url = web_sys::Url::create_object_url_with_blob(&blob)
        .map_err(|_| "cannot make a download link")?;
    let a: web_sys::HtmlAnchorElement = doc
        .create_element("a")
        .map_err(|_| "no anchor")?
        .dyn_into()
        .map_err(|_| "no anchor")?;
    a.set_href(&url);
    a.set_download(filename);
    a.click();
    let _ = web_sys::Url::revoke_object_url(&url);
    Ok(())
}

/// Whether the system asks for a dark theme. The query list is made once: `matchMedia` parses its query on every
/// call (0.1 ms of each slider move's repaint), while a kept list's `matches` follows the system as it changes.
pub fn prefers_dark() -> bool {
    thread_local! {
        static DARK: Option<web_sys::MediaQueryList> =
            window().and_then(|w| w.match_media("(prefers-color-scheme: dark)").ok().flatten());
    }
    DARK.with(|m| m.as_ref().is_some_and(web_sys::MediaQueryList::matches))
}

/// Sets the document root's `data-theme` (`light` or `dark`, whose colours the stylesheet then uses whatever the
/// system's scheme), or removes it so the stylesheet follows `prefers-color-scheme`.
pub fn set_root_theme(theme: Option<&str>) {
    let Some(root) = window()
        .and_then(|w| w.document())
        .and_then(|d| d.document_element())
    else {
        return;
    };
    let _ = match theme {
        Some(t) => root.set_attribute("data-theme", t),
        None => root.remove_attribute("data-theme"),
    };
}

/// Focuses an element by id, after the pending render (the element may be shown by the same change).
pub fn focus_soon(id: &'static str) {
    let Some(w) = window() else { return };
    let f = wasm_bindgen::closure::Closure::once_into_js(move || {
        let el = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.get_element_by_id(id))
            .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok());
        if let Some(el) = el {
            let _ = el.focus();
        }
    });
    let _ = w.request_animation_frame(f.unchecked_ref());
}

/// Runs `f` `delay_ms` after the next frame has been painted (a timeout queued from an animation frame runs after
/// that frame's paint): what the first figure does not need is built after the figure is on screen.
pub fn after_next_paint(delay_ms: i32, f: impl FnOnce() + 'static) {
    let Some(w) = window() else { return };
    let later = wasm_bindgen::closure::Closure::once_into_js(move || {
        let Some(w) = web_sys::window() else { return };
        let run = wasm_bindgen::closure::Closure::once_into_js(f);
        let _ =
            w.set_timeout_with_callback_and_timeout_and_arguments_0(run.unchecked_ref(), delay_ms);
    });
    let _ = w.request_animation_frame(later.unchecked_ref());
}

/// Milliseconds since navigation.
pub fn now_ms() -> f64 {
    window()
        .and_then(|w| w.performance())
        .map(|p| p.now())
        .unwrap_or(0.0)
}

/// Records one latency in `window[key]` for benchmarks (a plain JS array): `__peakplanTimings` from a slider's
/// input to the repaint (`__peakplanColdTimings` again for the moves that estimated their plan: none kept), and
/// `__peakplanFilledTimings` to the repaint that has every bar at the new value.
pub fn record_timing(key: &str, ms: f64) {
    if let Some(arr) = bench_array(key).filter(|a| a.length() < 100_000) {
        arr.push(&wasm_bindgen::JsValue::from_f64(ms));
    }
}

/// The plain JS array `window[key]` that a benchmark reads back, made on first use.
fn bench_array(key: &str) -> Option<js_sys::Array> {
    let w = window()?;
    let key = wasm_bindgen::JsValue::from_str(key);
    let found = js_sys::Reflect::get(&w, &key)
        .ok()
        .and_then(|v| v.dyn_into::<js_sys::Array>().ok());
    Some(found.unwrap_or_else(|| {
        let a = js_sys::Array::new();
        let _ = js_sys::Reflect::set(&w, &key, &a);
        a
    }))
}

/// A canvas that is in no document, to draw on without showing anything.
pub fn detached_canvas() -> Option<web_sys::HtmlCanvasElement> {
    window()?
        .document()?
        .create_element("canvas")
        .ok()?
        .dyn_into()
        .ok()
}

/// Marks a start-up milestone on the page's performance timeline (`performance.mark`), once per name: the
/// benchmark (`tests/e2e/startup.mjs`) reads them back as the breakdown of the wait for the first figure.
pub fn milestone(name: &'static str) {
    thread_local! {
        // Names marked already: later calls (every slider move passes the first estimate's) stay in Rust.
        static MARKED: std::cell::RefCell<Vec<&'static str>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    if MARKED.with_borrow(|m| m.contains(&name)) {
        return;
    }
    MARKED.with_borrow_mut(|m| m.push(name));
    if let Some(p) = window().and_then(|w| w.performance()) {
        let _ = p.mark(name);
    }
}

/// Runs `work`, recording its name, start and duration in `window.__peakplanTasks` (`[name, start_ms,
/// duration_ms]`, at most 10,000): the start-up benchmark lists what ran after the first figure, and for how long.
pub fn timed<T>(name: &'static str, work: impl FnOnce() -> T) -> T {
    let start = now_ms();
    let out = work();
    let Some(arr) = bench_array("__peakplanTasks") else {
        return out;
    };
    if arr.length() < 10_000 {
        let entry = js_sys::Array::of3(
            &wasm_bindgen::JsValue::from_str(name),
            &wasm_bindgen::JsValue::from_f64(start),
            &wasm_bindgen::JsValue::from_f64(now_ms() - start),
        );
        arr.push(&entry);
    }
    out
}

thread_local! {
    static PAINTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the chart has been painted once: work that the first figure does not need waits for it
/// ([`crate::state::on_settled_plan`]).
pub fn painted() -> bool {
    PAINTED.get()
}

/// Records, once, when the chart was first painted (`window.__peakplanFirstPaint`, ms since navigation).
pub fn mark_first_paint() {
    PAINTED.set(true);
    milestone("peakplan:chart-painted");
    let Some(w) = window() else { return };
    let key = wasm_bindgen::JsValue::from_str("__peakplanFirstPaint");
    if js_sys::Reflect::get(&w, &key)
        .map(|v| v.is_undefined())
        .unwrap_or(false)
    {
        let _ = js_sys::Reflect::set(&w, &key, &wasm_bindgen::JsValue::from_f64(now_ms()));
    }
}

/// Why [`fetch_text`] has no text.
pub enum FetchError {
    /// The request failed: offline, refused, or blocked (CORS, the page's CSP, an extension).
    Network,
    /// No whole answer within [`crate::hub::TIMEOUT_SECS`]: the request, or its body, was aborted then.
    TimedOut,
    /// The answer says it is this many bytes (its `content-length`), over the cap: not read.
    TooLarge(usize),
    /// More than the cap arrived (no `content-length`, or a false one): reading stopped there.
    OverCap,
    /// The body is not UTF-8 text.
    NotText,
}

/// Aborts a request when its time is up, unless dropped first (the timer is cleared then): an answer that stalls
/// ends in [`FetchError::TimedOut`] instead of a spinner for ever.
struct Deadline {
    window: web_sys::Window,
    controller: web_sys::AbortController,
    timer: i32,
    /// Kept alive while the timer may fire.
    _fire: wasm_bindgen::closure::Closure<dyn FnMut()>,
}

impl Deadline {
    fn start(
        window: web_sys::Window,
        seconds: u32,
        controller: Option<web_sys::AbortController>,
    ) -> Option<Deadline> {
        let controller = match controller {
            Some(c) => c,
            None => web_sys::AbortController::new().ok()?,
        };
        let abort = controller.clone();
        let fire = wasm_bindgen::closure::Closure::<dyn FnMut()>::new(move || abort.abort());
        let timer = window
            .set_timeout_with_callback_and_timeout_and_arguments_0(
                fire.as_ref().unchecked_ref(),
                i32::try_from(seconds.saturating_mul(1000)).unwrap_or(i32::MAX),
            )
            .ok()?;
        Some(Deadline {
            window,
            controller,
            timer,
            _fire: fire,
        })
    }

    fn signal(&self) -> web_sys::AbortSignal {
        self.controller.signal()
    }

    /// Why a step failed: the time was up (and the step aborted), or the network.
    fn error(&self) -> FetchError {
        if self.controller.signal().aborted() {
            FetchError::TimedOut
        } else {
            FetchError::Network
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.window.clear_timeout_with_handle(self.timer);
    }
}

/// GETs `url` (CORS, no cookies, no referrer), with `token` as `Authorization: Bearer` when given, aborted after
/// [`crate::hub::TIMEOUT_SECS`]: the status, and for a 2xx answer its text, refused unread when it says it is over
/// `cap` bytes, and read no further once more than `cap` bytes have arrived. `cancel`, when given, is the request's
/// abort controller, which the caller keeps to stop it (the page's Cancel); the error then is moot to the caller.
pub async fn fetch_text(
    url: &str,
    token: Option<&str>,
    cap: usize,
    cancel: Option<web_sys::AbortController>,
) -> Result<(u16, String), FetchError> {
    use FetchError::Network;
    let w = window().ok_or(Network)?;
    let deadline = Deadline::start(w.clone(), crate::hub::TIMEOUT_SECS, cancel).ok_or(Network)?;
    let init = web_sys::RequestInit::new();
    init.set_method("GET");
    init.set_mode(web_sys::RequestMode::Cors);
    init.set_credentials(web_sys::RequestCredentials::Omit);
    init.set_referrer_policy(web_sys::ReferrerPolicy::NoReferrer);
    init.set_signal(Some(&deadline.signal()));
    if let Some(t) = token {
        let headers = web_sys::Headers::new().map_err(|_| Network)?;
        headers
            .set("Authorization", &format!("Bearer {t}"))
            .map_err(|_| Network)?;
        init.set_headers(&headers);
    }
    let request = web_sys::Request::new_with_str_and_init(url, &init).map_err(|_| Network)?;
    let response: web_sys::Response = w
        .fetch_with_request(&request)
        .await
        .map_err(|_| deadline.error())?
        .dyn_into()
        .map_err(|_| Network)?;
    let status = response.status();
    if !response.ok() {
        return Ok((status, String::new()));
    }
    let declared = response
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|n| n.trim().parse::<usize>().ok());
    if let Some(n) = declared.filter(|n| *n > cap) {
        return Err(FetchError::TooLarge(n));
    }
    let text = read_capped(&response, cap, &deadline).await?;
    Ok((status, text))
}

/// The body of `response`, read chunk by chunk through its stream's reader and cancelled once more than `cap`
/// bytes have come (`text()` would read a body of any size whole first), then decoded as strict UTF-8 (`text()`
/// would replace bad bytes, where the CLI refuses them).
async fn read_capped(
    response: &web_sys::Response,
    cap: usize,
    deadline: &Deadline,
) -> Result<String, FetchError> {
    let mut body = crate::hub::CappedBody::new(cap);
    let Some(stream) = response.body() else {
        return Ok(String::new());
    };
    let reader: web_sys::ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    loop {
        let chunk: web_sys::ReadableStreamReadResult = reader
            .read()
            .await
            .map_err(|_| deadline.error())?
            .unchecked_into();
        if chunk.get_done().unwrap_or(true) {
            break;
        }
        let bytes = js_sys::Uint8Array::new(&chunk.get_value()).to_vec();
        if !body.push(&bytes) {
            // Awaited, so that a refused cancel is handled here rather than reported as an uncaught rejection.
            let _ = reader.cancel().await;
            return Err(FetchError::OverCap);
        }
    }
    body.text().ok_or(FetchError::NotText)
}

/// Opens the `<details>` of that id and scrolls it into view.
pub fn open_details(id: &str) {
    let el = window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id));
    if let Some(el) = el {
        let _ = el.set_attribute("open", "");
        el.scroll_into_view();
    }
}

/// A new abort controller for a request the reader may stop; `None` where the browser has none.
pub fn abort_controller() -> Option<web_sys::AbortController> {
    web_sys::AbortController::new().ok()
}

/// Whether a `<details>` element is open after its `toggle` event `ev`.
pub fn details_open(ev: &web_sys::Event) -> bool {
    ev.target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .is_some_and(|d| d.has_attribute("open"))
}
