//! Loading kernels from several threads at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::context::tests::validated_context;
use crate::{shaders, DeviceContext, Kernel};

/// What a load calls as it starts building a kernel the cache did not
/// have, with its device's id: a test holds a load there.
type Hook = Arc<dyn Fn(u64) + Send + Sync>;

static BUILDING: Mutex<Option<Hook>> = Mutex::new(None);

/// Called by every load as it starts building (tests only). The hook is
/// cloned out, so no lock is held while it runs.
pub(super) fn building(device: u64) {
    let hook = BUILDING.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(hook) = hook {
        hook(device);
    }
}

fn set_hook(hook: Option<Hook>) {
    *BUILDING.lock().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// `y = 2 * x + y` with `kernel` (SAXPY) on four elements.
fn saxpy_works(ctx: &DeviceContext, kernel: &Kernel) {
    let x = ctx.enqueue_create_buffer::<f32>(4).unwrap();
    let y = ctx.enqueue_create_buffer::<f32>(4).unwrap();
    x.enqueue_copy_from(&[1.0f32, 2.0, 3.0, 4.0][..]).unwrap();
    y.enqueue_fill(1.0).unwrap();
    ctx.enqueue_function(kernel, 1, &[x.arg(), y.arg()], &[2.0f32.to_bits(), 4u32])
        .unwrap();
    assert_eq!(y.to_vec().unwrap(), [3.0, 5.0, 7.0, 9.0]);
}

/// One thread's load of SAXPY is held as it starts building; meanwhile
/// another thread loads another kernel and SAXPY itself. Holding a lock
/// across the build (as the device's kernel cache once did) makes those
/// loads wait for the first: they must finish while it is held. Once
/// released, the first load finds the SAXPY the other thread inserted and
/// returns that one, so both threads hold the same working kernel.
#[test]
fn a_load_in_progress_holds_up_no_other_load_and_both_get_one_kernel() {
    let ctx = validated_context();
    let log = ctx.diagnostics().validation_log();
    let id = ctx.stream.device.id;
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (started_tx, release_rx) = (Mutex::new(started_tx), Mutex::new(release_rx));
    let first = AtomicBool::new(true);
    set_hook(Some(Arc::new(move |device| {
        if device == id && first.swap(false, Ordering::SeqCst) {
            let _ = started_tx.lock().unwrap().send(());
            let _ = release_rx.lock().unwrap().recv();
        }
    })));
    let ctx = &ctx;
    let (held, others, finished) = thread::scope(|s| {
        let held = s.spawn(|| Kernel::new(ctx, shaders::SAXPY, "main"));
        started_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the first load reached its build");
        let (done_tx, done_rx) = mpsc::channel();
        let others = s.spawn(move || {
            let store = Kernel::new(ctx, shaders::STORE, "main");
            let saxpy = Kernel::new(ctx, shaders::SAXPY, "main");
            let _ = done_tx.send(());
            (store, saxpy)
        });
        let finished = done_rx.recv_timeout(Duration::from_secs(30)).is_ok();
        release_tx.send(()).unwrap();
        (held.join().unwrap(), others.join().unwrap(), finished)
    });
    set_hook(None);
    assert!(
        finished,
        "loads on another thread waited for a load held in its build"
    );
    let held = held.unwrap();
    let (store, saxpy) = (others.0.unwrap(), others.1.unwrap());
    assert!(
        held.shares_pipeline_with(&saxpy),
        "two loads of one kernel at once end with one pipeline"
    );
    assert!(!store.shares_pipeline_with(&saxpy));
    saxpy_works(ctx, &held);
    saxpy_works(ctx, &saxpy);
    let messages = log.messages();
    assert!(messages.is_empty(), "validation messages: {messages:?}");
}
