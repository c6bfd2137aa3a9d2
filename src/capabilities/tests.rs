//! Every entry of the capabilities table, loaded with its feature and
//! refused without it.
#![deny(unsafe_code)]

use super::spirv::FloatControl;
use super::*;

/// Features with every entry of the table on.
fn everything() -> (Features, SubgroupInfo) {
    let mut f = Features {
        shader_float16: true,
        shader_float64: true,
        shader_int64: true,
        shader_buffer_int64_atomics: true,
        shader_shared_int64_atomics: true,
        shader_int16: true,
        shader_int8: true,
        storage_buffer_16bit: true,
        uniform_and_storage_buffer_16bit: true,
        storage_push_constant_16: true,
        storage_buffer_8bit: true,
        uniform_and_storage_buffer_8bit: true,
        storage_push_constant_8: true,
        vulkan_memory_model: true,
        vulkan_memory_model_device_scope: true,
        buffer_device_address: true,
        shader_integer_dot_product: true,
        zero_initialize_workgroup_memory: true,
        non_semantic_info: true,
        maintenance4: true,
        variable_pointers_storage_buffer: true,
        variable_pointers: true,
        ..Features::default()
    };
    let fc = &mut f.float_controls;
    for widths in [
        &mut fc.denorm_preserve,
        &mut fc.denorm_flush_to_zero,
        &mut fc.signed_zero_inf_nan_preserve,
        &mut fc.rounding_mode_rte,
        &mut fc.rounding_mode_rtz,
    ] {
        *widths = [true; 3];
    }
    let subgroup = SubgroupInfo {
        supported_stages: vk::ShaderStageFlags::COMPUTE,
        supported_operations: vk::SubgroupFeatureFlags::from_raw(0xff),
        ..SubgroupInfo::default()
    };
    (f, subgroup)
}

/// Turns off what `need` asks for.
fn without(need: Need, f: &mut Features, s: &mut SubgroupInfo) {
    let mut off = |feature: Feature| match feature {
        Feature::ShaderFloat16 => f.shader_float16 = false,
        Feature::ShaderFloat64 => f.shader_float64 = false,
        Feature::ShaderInt64 => f.shader_int64 = false,
        Feature::ShaderBufferInt64Atomics => f.shader_buffer_int64_atomics = false,
        Feature::ShaderSharedInt64Atomics => f.shader_shared_int64_atomics = false,
        Feature::ShaderInt16 => f.shader_int16 = false,
        Feature::ShaderInt8 => f.shader_int8 = false,
        Feature::StorageBuffer16Bit => f.storage_buffer_16bit = false,
        Feature::UniformAndStorageBuffer16Bit => f.uniform_and_storage_buffer_16bit = false,
        Feature::StoragePushConstant16 => f.storage_push_constant_16 = false,
        Feature::StorageBuffer8Bit => f.storage_buffer_8bit = false,
        Feature::UniformAndStorageBuffer8Bit => f.uniform_and_storage_buffer_8bit = false,
        Feature::StoragePushConstant8 => f.storage_push_constant_8 = false,
        Feature::VulkanMemoryModel => f.vulkan_memory_model_device_scope = false,
        Feature::BufferDeviceAddress => f.buffer_device_address = false,
        Feature::ShaderIntegerDotProduct => f.shader_integer_dot_product = false,
        Feature::ZeroInitializeWorkgroupMemory => f.zero_initialize_workgroup_memory = false,
        Feature::NonSemanticInfo => f.non_semantic_info = false,
        Feature::Maintenance4 => f.maintenance4 = false,
        Feature::VariablePointersStorageBuffer => f.variable_pointers_storage_buffer = false,
        Feature::VariablePointers => f.variable_pointers = false,
    };
    match need {
        Need::Core | Need::Never(_) => {}
        Need::Feature(x) => off(x),
        Need::AnyOf(list) => list.iter().for_each(|x| off(*x)),
        Need::Subgroup(ops) => s.supported_operations &= !ops,
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
        let (mut f, mut s) = everything();
        let caps = [1, capability];
        let declared = Declared {
            capabilities: &caps,
            ..Declared::default()
        };
        let with = check(&declared, &f, &s, "dev");
        if let Need::Never(_) = need {
            let e = with.expect_err(name);
            assert!(e.contains(name), "{name}: {e}");
            continue;
        }
        assert_eq!(with, Ok(()), "{name}");
        without(need, &mut f, &mut s);
        match (missing_name(need), check(&declared, &f, &s, "dev")) {
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
            let (mut f, s) = everything();
            let modes = [(mode, width)];
            let declared = Declared {
                float_modes: &modes,
                ..Declared::default()
            };
            assert_eq!(check(&declared, &f, &s, "dev"), Ok(()), "{name} {width}");
            let fc = &mut f.float_controls;
            let widths = match control {
                FloatControl::DenormPreserve => &mut fc.denorm_preserve,
                FloatControl::DenormFlushToZero => &mut fc.denorm_flush_to_zero,
                FloatControl::SignedZeroInfNanPreserve => &mut fc.signed_zero_inf_nan_preserve,
                FloatControl::RoundingModeRte => &mut fc.rounding_mode_rte,
                FloatControl::RoundingModeRtz => &mut fc.rounding_mode_rtz,
            };
            widths[slot] = false;
            let e = check(&declared, &f, &s, "dev").unwrap_err();
            assert!(e.contains(name), "{e}");
            assert!(e.contains(&format!("Float{width}")), "{e}");
        }
    }
}

#[test]
fn subgroup_operations_need_the_compute_stage() {
    let (f, mut s) = everything();
    s.supported_stages = vk::ShaderStageFlags::FRAGMENT;
    let caps = [61];
    let declared = Declared {
        capabilities: &caps,
        ..Declared::default()
    };
    let e = check(&declared, &f, &s, "dev").unwrap_err();
    assert!(
        e.contains("GroupNonUniform") && e.contains("compute"),
        "{e}"
    );
}

#[test]
fn every_extension_and_initialized_workgroup_memory_is_checked() {
    for &(extension, need) in EXTENSIONS {
        let (mut f, mut s) = everything();
        let exts = [extension.to_string()];
        let declared = Declared {
            extensions: &exts,
            ..Declared::default()
        };
        match need {
            Need::Never(_) => {
                assert!(check(&declared, &f, &s, "dev").is_err(), "{extension}")
            }
            _ => assert_eq!(check(&declared, &f, &s, "dev"), Ok(()), "{extension}"),
        }
        without(need, &mut f, &mut s);
        if let Some(feature) = missing_name(need) {
            let e = check(&declared, &f, &s, "dev").unwrap_err();
            assert!(e.contains(extension) && e.contains(&feature), "{e}");
        }
    }
    let (mut f, s) = everything();
    let declared = Declared {
        initialized_workgroup: true,
        ..Declared::default()
    };
    assert_eq!(check(&declared, &f, &s, "dev"), Ok(()));
    f.zero_initialize_workgroup_memory = false;
    let e = check(&declared, &f, &s, "dev").unwrap_err();
    assert!(e.contains("shaderZeroInitializeWorkgroupMemory"), "{e}");
    let declared = Declared {
        local_size_id: true,
        ..Declared::default()
    };
    assert_eq!(check(&declared, &f, &s, "dev"), Ok(()));
    f.maintenance4 = false;
    let e = check(&declared, &f, &s, "dev").unwrap_err();
    assert!(
        e.contains("LocalSizeId") && e.contains("maintenance4"),
        "{e}"
    );
    // 64-bit atomics need the feature of the memory they operate on.
    let (mut f, s) = everything();
    let buffer = Declared {
        int64_atomics_buffer: true,
        ..Declared::default()
    };
    let shared = Declared {
        int64_atomics_shared: true,
        ..Declared::default()
    };
    f.shader_shared_int64_atomics = false;
    assert_eq!(check(&buffer, &f, &s, "dev"), Ok(()));
    let e = check(&shared, &f, &s, "dev").unwrap_err();
    assert!(
        e.contains("shared memory") && e.contains("shaderSharedInt64Atomics"),
        "{e}"
    );
    f.shader_shared_int64_atomics = true;
    f.shader_buffer_int64_atomics = false;
    assert_eq!(check(&shared, &f, &s, "dev"), Ok(()));
    let e = check(&buffer, &f, &s, "dev").unwrap_err();
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
    assert!(check(&unknown, &f, &s, "dev")
        .unwrap_err()
        .contains("99999"));
    let exts = ["SPV_XYZ_unknown".to_string()];
    let unknown = Declared {
        extensions: &exts,
        ..Declared::default()
    };
    assert!(check(&unknown, &f, &s, "dev")
        .unwrap_err()
        .contains("SPV_XYZ_unknown"));
}
