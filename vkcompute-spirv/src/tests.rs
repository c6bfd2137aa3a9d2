//! The reader on modules written here word by word: specialization
//! expressions of every operation Vulkan allows against their SPIR-V
//! definitions, decoration groups, duplicate decorations, layouts and the
//! call graph.

use rspirv::spirv::Op;

use crate::words::*;
use crate::{Module, Type, Value};

/// A module assembled from (opcode, operands), with fresh ids.
struct Asm {
    words: Vec<u32>,
    next: u32,
}

impl Asm {
    fn new() -> Self {
        Asm {
            words: vec![MAGIC, 0x0001_0500, 0, 0, 0],
            next: 1,
        }
    }

    fn id(&mut self) -> u32 {
        self.next += 1;
        self.next - 1
    }

    fn inst(&mut self, op: u32, operands: &[u32]) {
        self.words.push(((operands.len() as u32 + 1) << 16) | op);
        self.words.extend_from_slice(operands);
    }

    /// An instruction with a result id (and `ty` as its result type where
    /// not 0); the id.
    fn def(&mut self, op: u32, ty: u32, operands: &[u32]) -> u32 {
        let id = self.id();
        let mut all = Vec::new();
        if ty != 0 {
            all.push(ty);
        }
        all.push(id);
        all.extend_from_slice(operands);
        self.inst(op, &all);
        id
    }

    fn read(&mut self) -> Result<Module, String> {
        self.words[3] = self.next;
        Module::read(&self.words)
    }
}

/// Common types: bool, u32, i32, u64, i64, uvec3 and bvec3.
struct Types {
    boolean: u32,
    u32: u32,
    i32: u32,
    u64: u32,
    i64: u32,
    uvec3: u32,
    bvec3: u32,
}

fn types(a: &mut Asm) -> Types {
    let boolean = a.def(OP_TYPE_BOOL, 0, &[]);
    let u32_ = a.def(OP_TYPE_INT, 0, &[32, 0]);
    let i32_ = a.def(OP_TYPE_INT, 0, &[32, 1]);
    let u64_ = a.def(OP_TYPE_INT, 0, &[64, 0]);
    let i64_ = a.def(OP_TYPE_INT, 0, &[64, 1]);
    let uvec3 = a.def(OP_TYPE_VECTOR, 0, &[u32_, 3]);
    let bvec3 = a.def(OP_TYPE_VECTOR, 0, &[boolean, 3]);
    Types {
        boolean,
        u32: u32_,
        i32: i32_,
        u64: u64_,
        i64: i64_,
        uvec3,
        bvec3,
    }
}

fn int(bits: u64, width: u32, signed: bool) -> Value {
    Value::Int {
        bits,
        width,
        signed,
    }
}

fn spec_op(a: &mut Asm, ty: u32, op: Op, args: &[u32]) -> u32 {
    let mut operands = vec![op as u32];
    operands.extend_from_slice(args);
    a.def(OP_SPEC_CONSTANT_OP, ty, &operands)
}

#[test]
fn integer_operations_follow_spirv_at_32_and_64_bits() {
    let mut a = Asm::new();
    let t = types(&mut a);
    let c = |a: &mut Asm, ty: u32, v: u32| a.def(OP_CONSTANT, ty, &[v]);
    let minus_4539 = c(&mut a, t.i32, (-4539i32) as u32);
    let p5539 = c(&mut a, t.i32, 5539);
    let minus_7 = c(&mut a, t.i32, (-7i32) as u32);
    let p3 = c(&mut a, t.i32, 3);
    let u_big = c(&mut a, t.u32, 0xFFFF_FFF0);
    let u_5 = c(&mut a, t.u32, 5);
    let wide = a.def(OP_CONSTANT, t.u64, &[0xFFFF_FFFF, 0x0000_0001]); // 2^33 - 1
    let wide_neg = a.def(OP_CONSTANT, t.i64, &[0xFFFF_FFFE, 0xFFFF_FFFF]); // -2
    let cases = [
        (
            spec_op(&mut a, t.i32, Op::SMod, &[minus_4539, p5539]),
            int(1000, 32, true),
        ),
        (
            spec_op(&mut a, t.i32, Op::SMod, &[minus_7, p3]),
            int(2, 32, true),
        ),
        (
            spec_op(&mut a, t.i32, Op::SRem, &[minus_7, p3]),
            int((-1i32) as u32 as u64, 32, true),
        ),
        (
            spec_op(&mut a, t.i32, Op::SDiv, &[minus_7, p3]),
            int((-2i32) as u32 as u64, 32, true),
        ),
        (
            spec_op(&mut a, t.u32, Op::UDiv, &[u_big, u_5]),
            int(0xFFFF_FFF0 / 5, 32, false),
        ),
        (
            spec_op(&mut a, t.u32, Op::IAdd, &[u_big, u_big]),
            int(0xFFFF_FFE0, 32, false),
        ),
        (
            spec_op(&mut a, t.u32, Op::ShiftRightArithmetic, &[u_big, u_5]),
            int(0xFFFF_FFFF, 32, false),
        ),
        (
            spec_op(&mut a, t.u32, Op::ShiftRightLogical, &[u_big, u_5]),
            int(0x07FF_FFFF, 32, false),
        ),
        (
            spec_op(&mut a, t.u64, Op::UConvert, &[u_big]),
            int(0xFFFF_FFF0, 64, false),
        ),
        (
            spec_op(&mut a, t.i64, Op::SConvert, &[minus_7]),
            int((-7i64) as u64, 64, true),
        ),
        (
            spec_op(&mut a, t.u32, Op::UConvert, &[wide]),
            int(0xFFFF_FFFF, 32, false),
        ),
        (
            spec_op(&mut a, t.u64, Op::IMul, &[wide, wide]),
            int(((1u64 << 33) - 1).wrapping_mul((1u64 << 33) - 1), 64, false),
        ),
        (
            spec_op(&mut a, t.i64, Op::SDiv, &[wide, wide_neg]),
            int((-((1i64 << 32) - 1)) as u64, 64, true),
        ),
        (
            spec_op(&mut a, t.u32, Op::Not, &[u_5]),
            int(!5u32 as u64, 32, false),
        ),
        (
            spec_op(&mut a, t.i32, Op::SNegate, &[p3]),
            int((-3i32) as u32 as u64, 32, true),
        ),
        (
            spec_op(&mut a, t.boolean, Op::SLessThan, &[minus_7, p3]),
            Value::Bool(true),
        ),
        (
            spec_op(&mut a, t.boolean, Op::ULessThan, &[minus_7, p3]),
            Value::Bool(false),
        ),
        (
            spec_op(&mut a, t.boolean, Op::UGreaterThan, &[u_big, u_5]),
            Value::Bool(true),
        ),
        (
            spec_op(&mut a, t.boolean, Op::SGreaterThanEqual, &[u_big, u_5]),
            Value::Bool(false),
        ),
        (
            spec_op(&mut a, t.boolean, Op::IEqual, &[u_5, u_5]),
            Value::Bool(true),
        ),
    ];
    let m = a.read().unwrap();
    for (i, (id, want)) in cases.iter().enumerate() {
        assert_eq!(m.value(*id), Some(want), "case {i}");
    }
}

#[test]
fn logical_select_and_composite_operations_follow_spirv() {
    let mut a = Asm::new();
    let t = types(&mut a);
    let yes = a.def(OP_SPEC_CONSTANT_TRUE, t.boolean, &[]);
    let no = a.def(OP_CONSTANT_FALSE, t.boolean, &[]);
    let one = a.def(OP_CONSTANT, t.u32, &[1]);
    let two = a.def(OP_CONSTANT, t.u32, &[2]);
    let three = a.def(OP_SPEC_CONSTANT, t.u32, &[3]);
    let v = a.def(OP_SPEC_CONSTANT_COMPOSITE, t.uvec3, &[one, two, three]);
    let w = a.def(OP_CONSTANT_COMPOSITE, t.uvec3, &[three, three, one]);
    let mask = a.def(OP_CONSTANT_COMPOSITE, t.bvec3, &[yes, no, yes]);
    let and = spec_op(&mut a, t.boolean, Op::LogicalAnd, &[yes, no]);
    let or = spec_op(&mut a, t.boolean, Op::LogicalOr, &[yes, no]);
    let not = spec_op(&mut a, t.boolean, Op::LogicalNot, &[no]);
    let eq = spec_op(&mut a, t.boolean, Op::LogicalNotEqual, &[yes, no]);
    let select = spec_op(&mut a, t.u32, Op::Select, &[no, one, two]);
    let select_v = spec_op(&mut a, t.uvec3, Op::Select, &[mask, v, w]);
    let shuffle = spec_op(&mut a, t.uvec3, Op::VectorShuffle, &[v, w, 5, 0, 3]);
    let extract = spec_op(&mut a, t.u32, Op::CompositeExtract, &[v, 2]);
    let insert = spec_op(&mut a, t.uvec3, Op::CompositeInsert, &[two, v, 0]);
    let add_v = spec_op(&mut a, t.uvec3, Op::IAdd, &[v, w]);
    let less_v = spec_op(&mut a, t.bvec3, Op::ULessThan, &[v, w]);
    let undefined = spec_op(
        &mut a,
        t.uvec3,
        Op::VectorShuffle,
        &[v, w, 0xFFFF_FFFF, 0, 1],
    );
    let m = a.read().unwrap();
    let u = |b: u64| int(b, 32, false);
    let vec = |x: [u64; 3]| Value::Composite(x.iter().map(|&b| u(b)).collect());
    assert_eq!(m.value(and), Some(&Value::Bool(false)));
    assert_eq!(m.value(or), Some(&Value::Bool(true)));
    assert_eq!(m.value(not), Some(&Value::Bool(true)));
    assert_eq!(m.value(eq), Some(&Value::Bool(true)));
    assert_eq!(m.value(select), Some(&u(2)));
    assert_eq!(m.value(select_v), Some(&vec([1, 3, 3])));
    assert_eq!(m.value(shuffle), Some(&vec([1, 1, 3])));
    assert_eq!(m.value(extract), Some(&u(3)));
    assert_eq!(m.value(insert), Some(&vec([2, 2, 3])));
    assert_eq!(m.value(add_v), Some(&vec([4, 5, 4])));
    assert_eq!(
        m.value(less_v),
        Some(&Value::Composite(vec![
            Value::Bool(true),
            Value::Bool(true),
            Value::Bool(false)
        ]))
    );
    // An undefined component has no value; it is no error.
    assert_eq!(m.value(undefined), None);
}

#[test]
fn undefined_results_are_refused() {
    for (op, b, what) in [
        (Op::UDiv, 0u32, "division by zero"),
        (Op::SMod, 0, "division by zero"),
        (Op::SDiv, u32::MAX, "divided by -1"),
        (Op::ShiftLeftLogical, 32, "shift by 32"),
    ] {
        let mut a = Asm::new();
        let t = types(&mut a);
        let x = a.def(OP_CONSTANT, t.i32, &[0x8000_0000]);
        let y = a.def(OP_CONSTANT, t.i32, &[b]);
        spec_op(&mut a, t.i32, op, &[x, y]);
        let e = a.read().unwrap_err();
        assert!(e.contains(what), "{op:?}: {e}");
    }
}

#[test]
fn decoration_groups_decorate_their_targets_and_members() {
    let mut a = Asm::new();
    let group = a.id();
    let member_group = a.id();
    let t = types(&mut a);
    let st = a.def(OP_TYPE_STRUCT, 0, &[t.u32, t.u32]);
    a.inst(OP_DECORATE, &[group, DECORATION_DESCRIPTOR_SET, 3]);
    a.inst(OP_DECORATE, &[group, DECORATION_BINDING, 7]);
    a.inst(73, &[group]);
    a.inst(OP_DECORATE, &[member_group, DECORATION_OFFSET, 16]);
    a.inst(73, &[member_group]);
    let target = a.id();
    a.inst(74, &[group, target]);
    a.inst(75, &[member_group, st, 1]);
    let m = a.read().unwrap();
    assert_eq!(
        m.decoration_value(target, DECORATION_DESCRIPTOR_SET),
        Some(3)
    );
    assert_eq!(m.decoration_value(target, DECORATION_BINDING), Some(7));
    assert_eq!(
        m.member_decoration(st, 1, DECORATION_OFFSET),
        Some(&[16][..])
    );
    assert_eq!(m.member_decoration(st, 0, DECORATION_OFFSET), None);
}

#[test]
fn a_stride_of_zero_is_refused() {
    for decoration in [DECORATION_ARRAY_STRIDE, DECORATION_MATRIX_STRIDE] {
        let mut a = Asm::new();
        let target = a.id();
        a.inst(OP_DECORATE, &[target, decoration, 0]);
        let e = a.read().unwrap_err();
        assert!(e.contains("Stride 0"), "{e}");
        let mut a = Asm::new();
        let target = a.id();
        a.inst(OP_DECORATE, &[target, decoration, 4]);
        assert_eq!(
            a.read().unwrap().decoration_value(target, decoration),
            Some(4)
        );
    }
}

#[test]
fn a_decoration_given_twice_with_different_values_is_refused() {
    let mut a = Asm::new();
    let target = a.id();
    let group = a.id();
    a.inst(OP_DECORATE, &[target, DECORATION_BINDING, 1]);
    a.inst(OP_DECORATE, &[group, DECORATION_BINDING, 2]);
    a.inst(73, &[group]);
    a.inst(74, &[group, target]);
    let e = a.read().unwrap_err();
    assert!(e.contains("decorated Binding twice"), "{e}");
    // The same value twice says nothing ambiguous.
    let mut a = Asm::new();
    let target = a.id();
    a.inst(OP_DECORATE, &[target, DECORATION_BINDING, 1]);
    a.inst(OP_DECORATE, &[target, DECORATION_BINDING, 1]);
    assert_eq!(
        a.read()
            .unwrap()
            .decoration_value(target, DECORATION_BINDING),
        Some(1)
    );
}

#[test]
fn extents_end_at_the_last_byte_a_member_occupies() {
    let mut a = Asm::new();
    let t = types(&mut a);
    let float = a.def(OP_TYPE_FLOAT, 0, &[32]);
    let vec3 = a.def(OP_TYPE_VECTOR, 0, &[float, 3]);
    let mat2x3 = a.def(OP_TYPE_MATRIX, 0, &[vec3, 2]);
    let four = a.def(OP_CONSTANT, t.u32, &[4]);
    let arr = a.def(OP_TYPE_ARRAY, 0, &[float, four]);
    a.inst(OP_DECORATE, &[arr, DECORATION_ARRAY_STRIDE, 16]);
    // { vec3 v @0; mat2x3 m @16 (stride 16); float a[4] @48 (stride 16);
    //   mat2x3 r @112 row-major (3 rows of 2, stride 16) }
    let st = a.def(OP_TYPE_STRUCT, 0, &[vec3, mat2x3, arr, mat2x3]);
    for (member, offset) in [(0, 0), (1, 16), (2, 48), (3, 112)] {
        a.inst(OP_MEMBER_DECORATE, &[st, member, DECORATION_OFFSET, offset]);
    }
    for member in [1, 3] {
        a.inst(
            OP_MEMBER_DECORATE,
            &[st, member, DECORATION_MATRIX_STRIDE, 16],
        );
    }
    a.inst(OP_MEMBER_DECORATE, &[st, 3, DECORATION_ROW_MAJOR]);
    let m = a.read().unwrap();
    let tree = m.type_tree(st).unwrap();
    let Type::Struct { members, .. } = &tree else {
        panic!("{tree:?}")
    };
    let extents: Vec<Option<u64>> = members.iter().map(|m| m.ty.extent()).collect();
    // vec3: 12; mat2x3: 16 + 12; float[4]: 3 * 16 + 4; row-major: 2 * 16 + 8.
    assert_eq!(extents, [Some(12), Some(28), Some(52), Some(40)]);
    assert_eq!(tree.extent(), Some(112 + 40));
}

#[test]
fn the_call_graph_gives_depth_and_refuses_recursion() {
    let build = |recursive: bool| {
        let mut a = Asm::new();
        let void = a.def(19, 0, &[]);
        let fn_ty = a.def(OP_TYPE_FUNCTION, 0, &[void]);
        let ids: Vec<u32> = (0..4).map(|_| a.id()).collect();
        for (i, &f) in ids.iter().enumerate() {
            a.inst(54, &[void, f, 0, fn_ty]);
            let label = a.id();
            a.inst(248, &[label]);
            let callee = if i + 1 < ids.len() {
                Some(ids[i + 1])
            } else if recursive {
                Some(ids[1])
            } else {
                None
            };
            if let Some(c) = callee {
                let r = a.id();
                a.inst(57, &[void, r, c]);
            }
            a.inst(253, &[]);
            a.inst(56, &[]);
        }
        let m = a.read().unwrap();
        m.call_tree(ids[0])
    };
    let (reached, depth) = build(false).unwrap();
    assert_eq!((reached.len(), depth), (4, 4));
    assert!(build(true).unwrap_err().contains("recursion"));
}

/// The interface of a kernel `main` with a storage buffer (set 0,
/// binding 0) and push constants, each a block `{ float a[N]; float b; }`
/// with `b` at byte 16 (so `N`, SpecId 0, default 4, fits at most 4), and
/// an unused array type of length `M` (SpecId 1, a signed int, default 1),
/// as the pipeline sees it with `spec` (SpecId, value) frozen in.
fn specialized_interface(spec: &[(u32, u32)]) -> Result<crate::Interface, String> {
    let mut a = Asm::new();
    let t = types(&mut a);
    let void = a.def(19, 0, &[]);
    let fn_ty = a.def(OP_TYPE_FUNCTION, 0, &[void]);
    let float = a.def(OP_TYPE_FLOAT, 0, &[32]);
    let n = a.def(OP_SPEC_CONSTANT, t.u32, &[4]);
    a.inst(OP_DECORATE, &[n, DECORATION_SPEC_ID, 0]);
    let m = a.def(OP_SPEC_CONSTANT, t.i32, &[1]);
    a.inst(OP_DECORATE, &[m, DECORATION_SPEC_ID, 1]);
    let arr = a.def(OP_TYPE_ARRAY, 0, &[float, n]);
    a.inst(OP_DECORATE, &[arr, DECORATION_ARRAY_STRIDE, 4]);
    a.def(OP_TYPE_ARRAY, 0, &[float, m]);
    let mut variables = Vec::new();
    for class in [STORAGE_CLASS_STORAGE_BUFFER, STORAGE_CLASS_PUSH_CONSTANT] {
        let block = a.def(OP_TYPE_STRUCT, 0, &[arr, float]);
        a.inst(OP_DECORATE, &[block, 2]); // Block
        for (member, offset, name) in [(0, 0, u32::from(b'a')), (1, 16, u32::from(b'b'))] {
            a.inst(
                OP_MEMBER_DECORATE,
                &[block, member, DECORATION_OFFSET, offset],
            );
            a.inst(6, &[block, member, name]); // OpMemberName
        }
        let pointer = a.def(OP_TYPE_POINTER, 0, &[class, block]);
        let variable = a.def(OP_VARIABLE, pointer, &[class]);
        if class == STORAGE_CLASS_STORAGE_BUFFER {
            a.inst(OP_DECORATE, &[variable, DECORATION_DESCRIPTOR_SET, 0]);
            a.inst(OP_DECORATE, &[variable, DECORATION_BINDING, 0]);
        }
        variables.push(variable);
    }
    let f = a.id();
    // "main", nul-terminated, then the interface.
    a.inst(
        OP_ENTRY_POINT,
        &[
            5,
            f,
            u32::from_le_bytes(*b"main"),
            0,
            variables[0],
            variables[1],
        ],
    );
    a.inst(OP_EXECUTION_MODE, &[f, MODE_LOCAL_SIZE, 1, 1, 1]);
    a.inst(54, &[void, f, 0, fn_ty]);
    let label = a.id();
    a.inst(248, &[label]);
    a.inst(253, &[]);
    a.inst(56, &[]);
    let declared = a.read().unwrap();
    let bytes: Vec<(u32, Vec<u8>)> = spec
        .iter()
        .map(|(id, v)| (*id, v.to_le_bytes().to_vec()))
        .collect();
    let frozen = crate::rules::freeze(&a.words, &declared, &bytes);
    Module::read(&frozen)?.interface("main")
}

#[test]
fn block_members_a_specialization_makes_overlap_are_refused() {
    // The defaults, and any length up to 4, leave `a` before `b`.
    for n in [None, Some(1), Some(4)] {
        let spec: Vec<(u32, u32)> = n.map(|n| (0, n)).into_iter().collect();
        let iface = specialized_interface(&spec).unwrap();
        assert_eq!(iface.bindings.len(), 1, "{n:?}");
        assert_eq!(iface.push.as_ref().map(|(_, size)| *size), Some(20));
    }
    // Five floats reach byte 20, past `b` at 16: the storage block (the
    // first the interface reads) is refused, naming both members.
    let e = specialized_interface(&[(0, 5)]).unwrap_err();
    assert!(
        e.contains("`a` (up to byte 20) and `b` (from byte 16) overlap"),
        "{e}"
    );
    assert!(e.contains("binding 0") && e.contains("06719"), "{e}");
}

#[test]
fn an_array_a_specialization_makes_empty_or_negative_is_refused() {
    for (value, shown) in [(0u32, "length 0"), ((-3i32) as u32, "length -3")] {
        let e = specialized_interface(&[(1, value)]).unwrap_err();
        assert!(
            e.contains(shown) && e.contains("at least one element"),
            "{e}"
        );
    }
    // The length of a block's array too.
    let e = specialized_interface(&[(0, 0)]).unwrap_err();
    assert!(e.contains("length 0"), "{e}");
    assert!(specialized_interface(&[(1, 7)]).is_ok());
}

#[test]
fn elements_of_an_array_that_overlap_are_refused() {
    let float = Type::Float { width: 32 };
    let inner = |n: u64| Type::Struct {
        name: Some("Inner".into()),
        members: vec![crate::Member {
            name: Some("v".into()),
            offset: Some(0),
            ty: Type::Array {
                element: Box::new(float.clone()),
                length: Some(n),
                stride: Some(4),
            },
        }],
    };
    let outer = |n: u64| Type::Array {
        element: Box::new(inner(n)),
        length: Some(2),
        stride: Some(16),
    };
    assert_eq!(outer(4).check_layout(), Ok(()));
    let e = outer(5).check_layout().unwrap_err();
    assert!(
        e.contains("each spans 20 bytes but they are 16 bytes apart"),
        "{e}"
    );
}
