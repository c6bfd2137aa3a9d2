//! Every entry of the capabilities table, loaded with its feature and
//! refused without it.

use super::spirv::FloatControl;
use super::structs::FeatureSet;
use super::*;

/// Capabilities with every feature, float-controls mode and subgroup
/// operation on.
fn everything() -> Capabilities {
    let mut fc = FloatControls::default();
    for widths in [
        &mut fc.denorm_preserve,
        &mut fc.denorm_flush_to_zero,
        &mut fc.signed_zero_inf_nan_preserve,
        &mut fc.rounding_mode_rte,
        &mut fc.rounding_mode_rtz,
    ] {
        *widths = [true; 3];
    }
    Capabilities {
        features: FeatureSet::all(),
        float_controls: fc,
        subgroup_stages: vk::ShaderStageFlags::COMPUTE,
        subgroup_operations: vk::SubgroupFeatureFlags::from_raw(0xff),
    }
}

/// Turns off what `need` asks for.
fn without(need: Need, c: &mut Capabilities) {
    match need {
        Need::Core | Need::Never(_) => {}
        Need::Feature(x) => c.features.remove(x),
        Need::AnyOf(list) => list.iter().for_each(|&x| c.features.remove(x)),
        Need::Subgroup(ops) => c.subgroup_operations &= !ops,
    }
}

fn missing_name(need: Need) -> Option<String> {
    match need {
        Need::Core => None,
        Need::Feature(f) => Some(f.name().to_string()),
        Need::AnyOf(list) => Some(list[0].name().to_string()),
        Need::Subgroup(ops) => Some(format!("{ops:?}")),
        Need::Never(what) => Some(what.to_string()),
    }
}

#[test]
fn every_capability_loads_with_its_feature_and_names_it_without() {
    for &(capability, name, need) in CAPABILITIES {
        let mut f = everything();
        let caps = [1, capability];
        let declared = Declared {
            capabilities: &caps,
            ..Declared::default()
        };
        let with = check(&declared, &f, "dev");
        if let Need::Never(_) = need {
            let e = with.expect_err(name);
            assert!(e.contains(name), "{name}: {e}");
            continue;
        }
        assert_eq!(with, Ok(()), "{name}");
        without(need, &mut f);
        match (missing_name(need), check(&declared, &f, "dev")) {
            (None, result) => assert_eq!(result, Ok(()), "{name}"),
            (Some(feature), Err(e)) => {
                assert!(e.contains(name), "{name}: {e}");
                assert!(e.contains(&feature), "{name} should name {feature}: {e}");
                assert!(e.contains("`dev`"), "{e}");
            }
            (Some(_), Ok(())) => panic!("{name} loaded without its feature"),
        }
    }
}

#[test]
fn float_control_modes_need_their_property_for_their_width() {
    for &(mode, name, control) in FLOAT_MODES {
        for (slot, width) in [16u32, 32, 64].into_iter().enumerate() {
            let mut f = everything();
            let modes = [(mode, width)];
            let declared = Declared {
                float_modes: &modes,
                ..Declared::default()
            };
            assert_eq!(check(&declared, &f, "dev"), Ok(()), "{name} {width}");
            let fc = &mut f.float_controls;
            let widths = match control {
                FloatControl::DenormPreserve => &mut fc.denorm_preserve,
                FloatControl::DenormFlushToZero => &mut fc.denorm_flush_to_zero,
                FloatControl::SignedZeroInfNanPreserve => &mut fc.signed_zero_inf_nan_preserve,
                FloatControl::RoundingModeRte => &mut fc.rounding_mode_rte,
                FloatControl::RoundingModeRtz => &mut fc.rounding_mode_rtz,
            };
            widths[slot] = false;
            let e = check(&declared, &f, "dev").unwrap_err();
            assert!(e.contains(name), "{e}");
            assert!(e.contains(&format!("Float{width}")), "{e}");
        }
    }
}

#[test]
fn subgroup_operations_need_the_compute_stage() {
    let mut f = everything();
    f.subgroup_stages = vk::ShaderStageFlags::FRAGMENT;
    let caps = [61];
    let declared = Declared {
        capabilities: &caps,
        ..Declared::default()
    };
    let e = check(&declared, &f, "dev").unwrap_err();
    assert!(
        e.contains("GroupNonUniform") && e.contains("compute"),
        "{e}"
    );
}

#[test]
fn every_extension_and_initialized_workgroup_memory_is_checked() {
    for &(extension, need) in EXTENSIONS {
        let mut f = everything();
        let exts = [extension.to_string()];
        let declared = Declared {
            extensions: &exts,
            ..Declared::default()
        };
        match need {
            Need::Never(_) => {
                assert!(check(&declared, &f, "dev").is_err(), "{extension}")
            }
            _ => assert_eq!(check(&declared, &f, "dev"), Ok(()), "{extension}"),
        }
        without(need, &mut f);
        if let Some(feature) = missing_name(need) {
            let e = check(&declared, &f, "dev").unwrap_err();
            assert!(e.contains(extension) && e.contains(&feature), "{e}");
        }
    }
    let mut f = everything();
    let declared = Declared {
        initialized_workgroup: true,
        ..Declared::default()
    };
    assert_eq!(check(&declared, &f, "dev"), Ok(()));
    f.features.remove(Feature::ZeroInitializeWorkgroupMemory);
    let e = check(&declared, &f, "dev").unwrap_err();
    assert!(e.contains("shaderZeroInitializeWorkgroupMemory"), "{e}");
    let declared = Declared {
        local_size_id: true,
        ..Declared::default()
    };
    assert_eq!(check(&declared, &f, "dev"), Ok(()));
    f.features.remove(Feature::Maintenance4);
    let e = check(&declared, &f, "dev").unwrap_err();
    assert!(
        e.contains("LocalSizeId") && e.contains("maintenance4"),
        "{e}"
    );
    // 64-bit atomics need the feature of the memory they operate on.
    let mut f = everything();
    let buffer = Declared {
        int64_atomics_buffer: true,
        ..Declared::default()
    };
    let shared = Declared {
        int64_atomics_shared: true,
        ..Declared::default()
    };
    f.features.remove(Feature::ShaderSharedInt64Atomics);
    assert_eq!(check(&buffer, &f, "dev"), Ok(()));
    let e = check(&shared, &f, "dev").unwrap_err();
    assert!(
        e.contains("shared memory") && e.contains("shaderSharedInt64Atomics"),
        "{e}"
    );
    f.features.insert(Feature::ShaderSharedInt64Atomics);
    f.features.remove(Feature::ShaderBufferInt64Atomics);
    assert_eq!(check(&shared, &f, "dev"), Ok(()));
    let e = check(&buffer, &f, "dev").unwrap_err();
    assert!(
        e.contains("buffer") && e.contains("shaderBufferInt64Atomics"),
        "{e}"
    );
    // Unknown capabilities and extensions are refused.
    let caps = [99_999];
    let unknown = Declared {
        capabilities: &caps,
        ..Declared::default()
    };
    assert!(check(&unknown, &f, "dev").unwrap_err().contains("99999"));
    let exts = ["SPV_XYZ_unknown".to_string()];
    let unknown = Declared {
        extensions: &exts,
        ..Declared::default()
    };
    assert!(check(&unknown, &f, "dev")
        .unwrap_err()
        .contains("SPV_XYZ_unknown"));
}

/// Each feature alone, written into the structs that enable it, reads
/// back as that feature alone (with, on Vulkan 1.3, the non-semantic info
/// that is core there): every row of the table has a field (or an
/// extension) of its own, on Vulkan 1.2 and 1.3.
#[test]
fn each_feature_enabled_reads_back_alone() {
    for core13 in [false, true] {
        for &feature in Feature::ALL {
            let mut one = FeatureSet::default();
            one.insert(feature);
            let mut expected = one;
            if core13 {
                expected.insert(Feature::NonSemanticInfo);
            }
            let mut structs = FeatureStructs::enabling(core13, one);
            assert_eq!(structs.read(), expected, "{feature:?} on 1.3: {core13}");
        }
    }
}

/// The extensions enabled with every feature: on Vulkan 1.3 only the ones
/// that never became core; on 1.2 also those of the 1.3 features.
#[test]
fn features_enable_their_extensions_where_not_core() {
    let names = |core13| {
        let structs = FeatureStructs::enabling(core13, FeatureSet::all());
        let mut names: Vec<String> = structs
            .extensions()
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(true),
        [
            "VK_EXT_robustness2",
            "VK_EXT_shader_atomic_float",
            "VK_EXT_shader_atomic_float2"
        ]
    );
    assert_eq!(
        names(false),
        [
            "VK_EXT_robustness2",
            "VK_EXT_shader_atomic_float",
            "VK_EXT_shader_atomic_float2",
            "VK_EXT_subgroup_size_control",
            "VK_KHR_shader_integer_dot_product",
            "VK_KHR_shader_non_semantic_info",
            "VK_KHR_zero_initialize_workgroup_memory",
        ]
    );
}

/// What vkcompute enables never holds a feature without the one it
/// requires, and synchronization2 only where asked for.
#[test]
fn enabled_features_come_with_what_they_require() {
    let mut offered = everything();
    for missing in [
        Feature::VulkanMemoryModelDeviceScope,
        Feature::RobustBufferAccess,
        Feature::VariablePointersStorageBuffer,
    ] {
        offered.features.remove(missing);
    }
    let opened = offered.enabled_when_opened(false);
    for dropped in [
        Feature::VulkanMemoryModel,
        Feature::RobustBufferAccess2,
        Feature::VariablePointers,
        Feature::Synchronization2,
    ] {
        assert!(!opened.has(dropped), "{dropped:?}");
    }
    assert!(opened.has(Feature::ShaderInt64) && opened.has(Feature::BufferDeviceAddress));
    assert!(offered
        .enabled_when_opened(true)
        .has(Feature::Synchronization2));
    // A borrowed device: robust buffer access taken as on, robustness2 as
    // off, addresses and synchronization2 as the application says.
    let borrowed = everything().enabled_when_borrowed(false, true);
    assert!(borrowed.has(Feature::RobustBufferAccess));
    assert!(!borrowed.has(Feature::RobustBufferAccess2));
    assert!(!borrowed.has(Feature::BufferDeviceAddress));
    assert!(borrowed.has(Feature::Synchronization2));
    assert!(borrowed.has(Feature::VulkanMemoryModel));
}
