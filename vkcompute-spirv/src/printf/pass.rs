//! The rewriting of `debugPrintfEXT` calls (see the module documentation
//! of `printf`), on `rspirv`'s representation: each call site becomes the
//! instructions that append its record.

use std::collections::HashMap;

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::Op;

use super::arguments::{plan, value_words, Plan};
use super::format::{self, Arg};
use super::parts::{
    declare_buffer, emit, emit_ids, global_invocation_id, id, remove_import, Rewrite,
};
use super::{Call, Printf, ASSERTION_SLOT, ASSERT_MARKER, FIRST_RECORD_SLOT};

/// Rewrites every `debugPrintfEXT` call of `module` (the module of entry
/// point `entry`, after its other passes) into appends to a record buffer
/// at (`set`, `binding`); `None` where there is no call. The error says
/// which call could not be rewritten (a format its arguments do not suit).
pub(crate) fn instrument(
    module: &mut Module,
    set: u32,
    binding: u32,
) -> Result<Option<Printf>, String> {
    let Some(printf_set) = module.ext_inst_imports.iter().find_map(|i| {
        matches!(i.operands.first(), Some(Operand::LiteralString(s)) if s == "NonSemantic.DebugPrintf")
            .then_some(i.result_id)
            .flatten()
    }) else {
        return Ok(None);
    };
    let strings: HashMap<u32, String> = module
        .debug_string_source
        .iter()
        .filter(|i| i.class.opcode == Op::String)
        .filter_map(|i| match (i.result_id, i.operands.first()) {
            (Some(id), Some(Operand::LiteralString(s))) => Some((id, s.clone())),
            _ => None,
        })
        .collect();
    let type_of: HashMap<u32, u32> = module
        .all_inst_iter()
        .filter_map(|i| Some((i.result_id?, i.result_type?)))
        .collect();
    let defs: HashMap<u32, (Op, Vec<Operand>)> = module
        .types_global_values
        .iter()
        .filter_map(|i| Some((i.result_id?, (i.class.opcode, i.operands.clone()))))
        .collect();
    let constant_of = |c: u32| match defs.get(&c) {
        Some((Op::Constant, ops)) => match ops.as_slice() {
            [Operand::LiteralBit32(v)] => Some(*v),
            _ => None,
        },
        _ => None,
    };
    // The calls: (function, block, instruction), and the line before each.
    let mut sites = Vec::new();
    for (f, function) in module.functions.iter().enumerate() {
        for (b, block) in function.blocks.iter().enumerate() {
            let mut line = None;
            for (i, inst) in block.instructions.iter().enumerate() {
                match (inst.class.opcode, inst.operands.as_slice()) {
                    (Op::Line, [Operand::IdRef(file), Operand::LiteralBit32(l), ..]) => {
                        line = strings.get(file).map(|f| (f.clone(), *l));
                    }
                    (Op::NoLine, _) => line = None,
                    (Op::ExtInst, [Operand::IdRef(s), Operand::LiteralExtInstInteger(1), ..])
                        if *s == printf_set =>
                    {
                        sites.push((f, b, i, line.clone()))
                    }
                    _ => {}
                }
            }
        }
    }
    let mut calls = Vec::with_capacity(sites.len());
    let mut plans: Vec<(u32, Vec<(u32, Plan)>)> = Vec::with_capacity(sites.len());
    for (n, (f, b, i, location)) in sites.iter().enumerate() {
        let inst = &module.functions[*f].blocks[*b].instructions[*i];
        // The call by number, and by place where the module says it.
        let place = match location {
            Some((file, line)) => format!(" ({file}, line {line})"),
            None => String::new(),
        };
        let what = |e: String| format!("debugPrintfEXT call {}{place}: {e}", n + 1);
        let fmt_id = inst
            .operands
            .get(2)
            .and_then(id)
            .ok_or_else(|| what("no format".into()))?;
        let text = strings
            .get(&fmt_id)
            .ok_or_else(|| what("its format is not a string literal".into()))?;
        let mut args: Vec<u32> = inst.operands[3..].iter().filter_map(id).collect();
        let mut assert_line = None;
        if let [.., line, marker] = args.as_slice() {
            if constant_of(*marker) == Some(ASSERT_MARKER) {
                assert_line = constant_of(*line);
                args.truncate(args.len() - 2);
            }
        }
        let mut described = Vec::with_capacity(args.len());
        let mut arg_plans = Vec::new();
        for (k, &a) in args.iter().enumerate() {
            if let Some(s) = strings.get(&a) {
                described.push(Arg::Text(s.clone()));
                continue;
            }
            let ty = type_of.get(&a).copied().unwrap_or(0);
            let plan = plan(&defs, ty).map_err(|e| what(format!("argument {} {e}", k + 1)))?;
            described.push(Arg::Value(plan.ty));
            arg_plans.push((a, plan));
        }
        let format =
            format::parse(text, &described).map_err(|e| what(format!("format {text:?}: {e}")))?;
        calls.push(Call {
            format,
            location: location.clone(),
            assert_line,
        });
        plans.push((fmt_id, arg_plans));
    }
    if sites.is_empty() {
        remove_import(module, printf_set);
        return Ok(None);
    }
    let uint = match module.types_global_values.iter().find(|i| {
        i.class.opcode == Op::TypeInt
            && i.operands == [Operand::LiteralBit32(32), Operand::LiteralBit32(0)]
    }) {
        Some(i) => i.result_id.ok_or("an OpTypeInt without a result id")?,
        None => {
            let id = crate::bounds::fresh_id(module)?;
            module.types_global_values.insert(
                0,
                Instruction::new(
                    Op::TypeInt,
                    None,
                    Some(id),
                    vec![Operand::LiteralBit32(32), Operand::LiteralBit32(0)],
                ),
            );
            id
        }
    };
    let version = module.header.as_ref().map_or((1, 0), |h| h.version());
    let vulkan_memory_model = matches!(
        module.memory_model.as_ref().and_then(|m| m.operands.get(1)),
        Some(Operand::MemoryModel(rspirv::spirv::MemoryModel::Vulkan))
    );
    let mut rw = Rewrite {
        module,
        made_constants: HashMap::new(),
        uint,
        bool_: None,
        int: None,
        float: None,
        uvec2: None,
        uvec3: None,
        uvec4: None,
    };
    let buffer = declare_buffer(&mut rw, version, set, binding)?;
    let gid = global_invocation_id(&mut rw)?;
    // Device scope, or QueueFamily under the Vulkan memory model (where
    // Device needs a capability of its own); relaxed.
    let scope = rw.constant(if vulkan_memory_model { 5 } else { 1 })?;
    let relaxed = rw.constant(0)?;
    let uvec3 = rw.uvec(3)?;
    let uvec4 = rw.uvec(4)?;
    let bool_ = rw.bool_type()?;
    let table = Printf {
        set,
        binding,
        calls,
    };
    // Every record takes one slot of `slot_units` uvec4s.
    let slot_units = table.slot_words() / 4;
    // Rewrite from the last site, so that earlier indices stay right.
    for (n, ((f, b, i, _), (_, arg_plans))) in sites.iter().zip(&plans).enumerate().rev() {
        let mut out = Vec::new();
        let r = &mut rw;
        let (c0, c1, c4) = (r.constant(0)?, r.constant(1)?, r.constant(4)?);
        let units_per_slot = r.constant(slot_units)?;
        // The record's number: the cursor before the add.
        let cursor = emit_ids(
            r,
            &mut out,
            Op::AccessChain,
            buffer.word_pointer,
            &[buffer.variable, c0],
        )?;
        let number = emit_ids(
            r,
            &mut out,
            Op::AtomicIAdd,
            uint,
            &[cursor, scope, relaxed, c1],
        )?;
        // Its slot, `number + 2` (`FIRST_RECORD_SLOT`), where that is
        // below the buffer's slot count and did not wrap, else the trash
        // slot 0. An assertion's record that does not fit takes the
        // assertion slot 1 instead, if no other took it before
        // (`ASSERTION_SLOT`): a failed assertion is never lost.
        let units = emit(
            r,
            &mut out,
            Op::ArrayLength,
            uint,
            vec![Operand::IdRef(buffer.variable), Operand::LiteralBit32(4)],
        )?;
        let slots = emit_ids(r, &mut out, Op::UDiv, uint, &[units, units_per_slot])?;
        let first = r.constant(FIRST_RECORD_SLOT)?;
        let next = emit_ids(r, &mut out, Op::IAdd, uint, &[number, first])?;
        let below_end = emit_ids(r, &mut out, Op::ULessThan, bool_, &[next, slots])?;
        let unwrapped = emit_ids(r, &mut out, Op::UGreaterThanEqual, bool_, &[next, first])?;
        let fits = emit_ids(r, &mut out, Op::LogicalAnd, bool_, &[below_end, unwrapped])?;
        let elsewhere = if table.calls[n].assert_line.is_some() {
            // Claim word 1 of the header, from 0 to 1, where the record
            // does not fit (where it does, the exchange writes 0 over 0).
            let claim = emit_ids(r, &mut out, Op::Select, uint, &[fits, c0, c1])?;
            let claimed_at = emit_ids(
                r,
                &mut out,
                Op::AccessChain,
                buffer.word_pointer,
                &[buffer.variable, c1],
            )?;
            let before = emit_ids(
                r,
                &mut out,
                Op::AtomicCompareExchange,
                uint,
                &[claimed_at, scope, relaxed, relaxed, claim, c0],
            )?;
            let won = emit_ids(r, &mut out, Op::IEqual, bool_, &[before, c0])?;
            let assertion_slot = r.constant(ASSERTION_SLOT)?;
            emit_ids(r, &mut out, Op::Select, uint, &[won, assertion_slot, c0])?
        } else {
            c0
        };
        let slot = emit_ids(r, &mut out, Op::Select, uint, &[fits, next, elsewhere])?;
        let base = emit_ids(r, &mut out, Op::IMul, uint, &[slot, units_per_slot])?;
        // The record, four words to a store: the format's number and the
        // global id, then the values, the last uvec4 filled with zeros.
        let mut words = vec![r.constant(n as u32 + 1)?];
        let id3 = emit_ids(r, &mut out, Op::Load, uvec3, &[gid])?;
        for k in 0..3 {
            words.push(emit(
                r,
                &mut out,
                Op::CompositeExtract,
                uint,
                vec![Operand::IdRef(id3), Operand::LiteralBit32(k)],
            )?);
        }
        for (value, plan) in arg_plans {
            value_words(r, &mut out, *value, plan, &type_of, &mut words)?;
        }
        words.resize(words.len().next_multiple_of(4), c0);
        for (k, unit) in words.chunks_exact(4).enumerate() {
            let index = if k == 0 {
                base
            } else {
                let ck = r.constant(k as u32)?;
                emit_ids(r, &mut out, Op::IAdd, uint, &[base, ck])?
            };
            let at = emit_ids(
                r,
                &mut out,
                Op::AccessChain,
                buffer.unit_pointer,
                &[buffer.variable, c4, index],
            )?;
            let value = emit_ids(r, &mut out, Op::CompositeConstruct, uvec4, unit)?;
            out.push(Instruction::new(
                Op::Store,
                None,
                None,
                vec![Operand::IdRef(at), Operand::IdRef(value)],
            ));
        }
        let block = &mut rw.module.functions[*f].blocks[*b];
        block.instructions.splice(*i..=*i, out);
    }
    remove_import(rw.module, printf_set);
    Ok(Some(table))
}
