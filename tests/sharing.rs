//! Sharing memory beyond one context (issue 14): exported and imported
//! buffers between two `VkDevice`s of one physical device and between two
//! processes, host memory imported without copies, semaphores (absent on
//! lavapipe: the error and the host-side fallback), zero-copy transfers
//! between contexts, and the refusals. Everything under validation.
#![cfg(unix)]

mod common;

use common::{context_with, options, Path};
use vkcompute::DeviceContext;

/// Two validated contexts on the same physical device: two `VkDevice`s.
fn two_contexts(path: Path) -> (DeviceContext, DeviceContext) {
    (context_with(options(path)), context_with(options(path)))
}

#[test]
fn device_info_has_the_ids_of_the_physical_device() {
    let (a, b) = two_contexts(Path::Direct);
    assert_eq!(a.info().uuid, b.info().uuid);
    assert_eq!(a.info().driver_uuid, b.info().driver_uuid);
    assert_ne!(a.info().uuid, [0; 16], "lavapipe reports a device UUID");
    let listed = DeviceContext::devices().unwrap();
    assert!(listed.iter().any(|d| d.uuid == a.info().uuid));
}
