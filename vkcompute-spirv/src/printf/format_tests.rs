//! Formats against C's printf semantics, written out with Rust's own
//! formatting where it agrees and by hand where C differs.

use super::format::*;

fn int(signed: bool, width: u32) -> Arg {
    Arg::Value(ArgType {
        kind: if signed {
            ArgKind::Signed
        } else {
            ArgKind::Unsigned
        },
        width,
        components: 1,
    })
}

fn float(width: u32, components: u32) -> Arg {
    Arg::Value(ArgType {
        kind: ArgKind::Float,
        width,
        components,
    })
}

/// `format` with one argument of type `arg` whose words are `words`.
fn one(format: &str, arg: Arg, words: &[u32]) -> String {
    parse(format, &[arg]).unwrap().render(words)
}

fn f32w(v: f32) -> Vec<u32> {
    vec![v.to_bits()]
}

/// `format` with one double `v`.
fn f64s(format: &str, v: f64) -> String {
    one(format, float(64, 1), &f64w(v))
}

fn f64w(v: f64) -> Vec<u32> {
    let b = v.to_bits();
    vec![b as u32, (b >> 32) as u32]
}

#[test]
fn integers_convert_as_c_does() {
    let m5 = (-5i32) as u32;
    assert_eq!(one("%d", int(true, 32), &[m5]), format!("{}", -5));
    assert_eq!(one("%i", int(true, 32), &[42]), "42");
    assert_eq!(one("%u", int(false, 32), &[u32::MAX]), u32::MAX.to_string());
    assert_eq!(one("%u", int(true, 32), &[m5]), (m5).to_string());
    assert_eq!(
        one("%x", int(false, 32), &[0xbeef]),
        format!("{:x}", 0xbeef)
    );
    assert_eq!(
        one("%X", int(false, 32), &[0xbeef]),
        format!("{:X}", 0xbeef)
    );
    assert_eq!(one("%#x", int(false, 32), &[255]), format!("{:#x}", 255));
    assert_eq!(one("%o", int(false, 32), &[8]), "10");
    assert_eq!(one("%#o", int(false, 32), &[8]), "010");
    assert_eq!(one("%c", int(false, 32), &[u32::from(b'A')]), "A");
    assert_eq!(one("%5d", int(true, 32), &[m5]), format!("{:>5}", -5));
    assert_eq!(one("%-5d|", int(true, 32), &[42]), format!("{:<5}|", 42));
    assert_eq!(one("%05d", int(true, 32), &[m5]), format!("{:05}", -5));
    assert_eq!(one("%+d", int(true, 32), &[42]), format!("{:+}", 42));
    assert_eq!(one("% d", int(true, 32), &[42]), " 42");
    assert_eq!(one("%.3d", int(true, 32), &[7]), "007");
    assert_eq!(one("%08.3d", int(true, 32), &[7]), "     007");
    let big = u64::MAX - 1;
    assert_eq!(
        one("%lu", int(false, 64), &[big as u32, (big >> 32) as u32]),
        big.to_string()
    );
    let neg = (-3_000_000_000i64) as u64;
    assert_eq!(
        one("%ld", int(true, 64), &[neg as u32, (neg >> 32) as u32]),
        "-3000000000"
    );
}

#[test]
fn floats_convert_as_c_does() {
    for v in [0.0f32, 1.5, -2.25, 1234.5678, 1e-7, 3.0e10] {
        assert_eq!(
            one("%f", float(32, 1), &f32w(v)),
            format!("{:.6}", f64::from(v))
        );
        assert_eq!(
            one("%.2f", float(32, 1), &f32w(v)),
            format!("{:.2}", f64::from(v))
        );
        assert_eq!(
            one("%10.3f", float(32, 1), &f32w(v)),
            format!("{:>10.3}", f64::from(v))
        );
    }
    assert_eq!(one("%e", float(32, 1), &f32w(1234.5)), "1.234500e+03");
    assert_eq!(one("%.2E", float(64, 1), &f64w(-0.000123)), "-1.23E-04");
    assert_eq!(one("%e", float(64, 1), &f64w(0.0)), "0.000000e+00");
    assert_eq!(one("%g", float(64, 1), &f64w(100000.0)), "100000");
    assert_eq!(one("%g", float(64, 1), &f64w(1000000.0)), "1e+06");
    assert_eq!(one("%g", float(64, 1), &f64w(0.0001)), "0.0001");
    assert_eq!(one("%g", float(64, 1), &f64w(0.00001)), "1e-05");
    assert_eq!(one("%g", float(64, 1), &f64w(1.5)), "1.5");
    assert_eq!(one("%.3g", float(64, 1), &f64w(1.23456)), "1.23");
    assert_eq!(one("%#g", float(64, 1), &f64w(1.5)), "1.50000");
    assert_eq!(one("%a", float(64, 1), &f64w(1.0)), "0x1p+0");
    assert_eq!(one("%a", float(64, 1), &f64w(0.5)), "0x1p-1");
    assert_eq!(one("%a", float(64, 1), &f64w(10.0)), "0x1.4p+3");
    assert_eq!(one("%A", float(64, 1), &f64w(-10.0)), "-0X1.4P+3");
    assert_eq!(one("%.1a", float(64, 1), &f64w(1.96875)), "0x2.0p+0");
    assert_eq!(one("%f", float(32, 1), &f32w(f32::INFINITY)), "inf");
    assert_eq!(one("%F", float(32, 1), &f32w(f32::NEG_INFINITY)), "-INF");
    assert_eq!(one("%f", float(32, 1), &f32w(f32::NAN)), "nan");
    assert_eq!(one("%08.2f", float(64, 1), &f64w(-1.5)), "-0001.50");
    assert_eq!(one("%+.1f", float(64, 1), &f64w(2.0)), "+2.0");
}

#[test]
fn vectors_strings_and_percent_signs() {
    let v: Vec<u32> = [1.0f32, 2.5, -3.0].iter().map(|f| f.to_bits()).collect();
    assert_eq!(
        one("v=%v3f", float(32, 3), &v),
        "v=1.000000, 2.500000, -3.000000"
    );
    let uv = Arg::Value(ArgType {
        kind: ArgKind::Unsigned,
        width: 32,
        components: 2,
    });
    assert_eq!(one("%v2u%%", uv, &[7, 8]), "7, 8%");
    let f = parse("%s and %d", &[Arg::Text("text".into()), int(true, 32)]).unwrap();
    assert_eq!(f.render(&[3]), "text and 3");
    assert_eq!(f.value_words(), 1);
}

#[test]
fn formats_their_arguments_do_not_suit_are_refused() {
    let cases: [(&str, Vec<Arg>, &str); 8] = [
        ("%d %d", vec![int(true, 32)], "fewer"),
        (
            "%d",
            vec![int(true, 32), int(true, 32)],
            "passes 2 arguments",
        ),
        ("%f", vec![int(true, 32)], "does not suit"),
        ("%d", vec![float(32, 1)], "does not suit"),
        ("%v3f", vec![float(32, 1)], "does not suit"),
        ("%ld", vec![int(true, 32)], "does not suit"),
        ("%q", vec![int(true, 32)], "not one printf knows"),
        ("%v5f", vec![float(32, 1)], "vector size"),
    ];
    for (format, args, why) in cases {
        let e = parse(format, &args).unwrap_err();
        assert!(e.contains(why), "{format}: {e}");
    }
    // A huge width is refused rather than allocated.
    assert!(parse("%99999999d", &[int(true, 32)]).is_err());
}

/// Integers of each conversion padded to `width` with the `0` flag, as C
/// pads them: zeros after a sign or a `0x`, whatever the first digit
/// (a letter too); spaces where `-` or a precision overrides the `0`.
#[test]
fn the_zero_flag_pads_integers_as_c_does() {
    let i32s = |format: &str, v: u32| one(format, int(true, 32), &[v]);
    assert_eq!(i32s("%08x", 0xabc), "00000abc");
    assert_eq!(i32s("%08X", 0xabc), "00000ABC");
    assert_eq!(i32s("%08x", 0x12a), "0000012a");
    assert_eq!(i32s("%#08x", 0xabc), "0x000abc");
    assert_eq!(i32s("%#010X", 0xff), "0X000000FF");
    // No prefix for a zero, so all zeros.
    assert_eq!(i32s("%#010x", 0), "0000000000");
    assert_eq!(i32s("%-08x|", 0xabc), "abc     |");
    assert_eq!(i32s("%0-8x|", 0xabc), "abc     |");
    assert_eq!(i32s("%08.3x", 0xabc), "     abc");
    assert_eq!(i32s("%08.4x", 0xabc), "    0abc");
    assert_eq!(i32s("%08o", 8), "00000010");
    assert_eq!(i32s("%#08o", 8), "00000010");
    assert_eq!(i32s("%08u", 42), "00000042");
    // `+` and ` ` sign only signed conversions.
    assert_eq!(i32s("%+08u", 42), "00000042");
    assert_eq!(i32s("%+08x", 0xabc), "00000abc");
    assert_eq!(i32s("%+08d", 42), "+0000042");
    assert_eq!(i32s("% 08d", 42), " 0000042");
    assert_eq!(i32s("%08d", (-42i32) as u32), "-0000042");
    assert_eq!(i32s("%+08i", (-42i32) as u32), "-0000042");
    assert_eq!(i32s("%+08.3d", 42), "    +042");
    assert_eq!(i32s("%08.0d", 0), "        ");
    assert_eq!(i32s("%+.0d", 0), "+");
    // `%c` pads with spaces whatever the flags, as glibc does.
    assert_eq!(i32s("%05c", u32::from(b'A')), "    A");
    let big = 0xabc_0000_0000u64;
    let words = [big as u32, (big >> 32) as u32];
    assert_eq!(one("%016lx", int(false, 64), &words), "00000abc00000000");
    assert_eq!(one("%#016lX", int(false, 64), &words), "0X000ABC00000000");
    assert_eq!(
        one("%+020ld", int(true, 64), &words),
        "+0000011802570129408"
    );
    let uv = Arg::Value(ArgType {
        kind: ArgKind::Unsigned,
        width: 32,
        components: 2,
    });
    assert_eq!(one("%08v2x", uv, &[0xabc, 0xd]), "00000abc, 0000000d");
}

/// `%s` takes a width, the `-` flag and a precision as C's does, in
/// bytes; a cut never splits a character (where C would cut its bytes).
#[test]
fn strings_take_a_width_and_a_precision() {
    let f = parse(
        "[%8s] [%-8s] [%.3s] [%08.2s] [%+ #s]",
        &[
            Arg::Text("abc".into()),
            Arg::Text("abc".into()),
            Arg::Text("abcdef".into()),
            Arg::Text("abc".into()),
            Arg::Text("x".into()),
        ],
    )
    .unwrap();
    assert_eq!(f.render(&[]), "[     abc] [abc     ] [abc] [      ab] [x]");
    assert_eq!(f.value_words(), 0);
    let text = |format: &str, s: &str| parse(format, &[Arg::Text(s.into())]).unwrap().render(&[]);
    assert_eq!(text("%.0s|", "abc"), "|");
    assert_eq!(text("%.9s", "abc"), "abc");
    assert_eq!(text("%2s", "abc"), "abc");
    // "\u{e9}" is two bytes.
    assert_eq!(text("%4s|", "\u{e9}"), "  \u{e9}|");
    assert_eq!(text("%.2s|", "\u{e9}!"), "\u{e9}|");
    assert_eq!(text("%.1s|", "\u{e9}"), "|");
}

/// `#` keeps the point, and under `%g` the trailing zeros, as C does.
#[test]
fn the_alternative_form_keeps_the_point() {
    assert_eq!(f64s("%#g", -477078.0), "-477078.");
    assert_eq!(one("%#g", float(32, 1), &f32w(-477078.0)), "-477078.");
    assert_eq!(f64s("%#g", 1.0), "1.00000");
    assert_eq!(f64s("%#g", 0.0), "0.00000");
    assert_eq!(f64s("%#.0g", 1.0), "1.");
    assert_eq!(f64s("%#.0g", 0.0), "0.");
    assert_eq!(f64s("%#.1g", 25.0), "2.e+01");
    assert_eq!(f64s("%#.2g", 9.96), "10.");
    assert_eq!(f64s("%#.3g", 100000.0), "1.00e+05");
    assert_eq!(f64s("%#G", 0.00001), "1.00000E-05");
    assert_eq!(f64s("%#010.0g", 3.0), "000000003.");
    assert_eq!(f64s("%#.0e", 1.0), "1.e+00");
    assert_eq!(f64s("%#.0f", 1.0), "1.");
    assert_eq!(f64s("%#.0F", 1.0), "1.");
    // Without `#`, none of it.
    assert_eq!(f64s("%g", -477078.0), "-477078");
    assert_eq!(f64s("%.0e", 1.0), "1e+00");
    assert_eq!(f64s("%.0f", 1.0), "1");
}

/// `%a` rounds its hex digits to the precision to nearest, ties to even
/// (a carry reaching the leading digit), and writes zero and subnormals
/// as glibc writes doubles.
#[test]
fn hex_floats_round_and_write_zero_and_subnormals_as_glibc_does() {
    assert_eq!(f64s("%.0a", 1.5), "0x2p+0");
    assert_eq!(f64s("%.0a", 2.5), "0x1p+1");
    assert_eq!(f64s("%.0a", 1.9), "0x2p+0");
    assert_eq!(f64s("%.0a", 1.0), "0x1p+0");
    assert_eq!(f64s("%#.0a", 1.0), "0x1.p+0");
    assert_eq!(f64s("%#.0A", 1.5), "0X2.P+0");
    assert_eq!(f64s("%.1a", 1.03125), "0x1.0p+0");
    assert_eq!(f64s("%.1a", 1.09375), "0x1.2p+0");
    assert_eq!(f64s("%.1a", 1.0625), "0x1.1p+0");
    assert_eq!(f64s("%.1a", 1.96875), "0x2.0p+0");
    assert_eq!(f64s("%.2a", 1.0), "0x1.00p+0");
    assert_eq!(f64s("%.15a", 1.5), "0x1.800000000000000p+0");
    assert_eq!(f64s("%a", 0.0), "0x0p+0");
    assert_eq!(f64s("%a", -0.0), "-0x0p+0");
    assert_eq!(f64s("%.2a", 0.0), "0x0.00p+0");
    assert_eq!(f64s("%#a", 0.0), "0x0.p+0");
    assert_eq!(f64s("%a", f64::from_bits(1)), "0x0.0000000000001p-1022");
    // Subnormals round as normal numbers do, into the leading digit too.
    assert_eq!(f64s("%.0a", f64::from_bits(1 << 51)), "0x0p-1022");
    assert_eq!(f64s("%.0a", f64::from_bits(3 << 50)), "0x1p-1022");
    assert_eq!(f64s("%.3a", f64::from_bits((1 << 52) - 1)), "0x1.000p-1022");
    assert_eq!(f64s("%010a", 1.0), "0x00001p+0");
    assert_eq!(f64s("%+a", 1.0), "+0x1p+0");
}

/// NaN and infinity take their sign from the bits and the flags, their
/// case from the conversion, and spaces, never zeros, from `0`.
#[test]
fn nan_and_infinity_take_signs_and_pad_with_spaces() {
    let negative_nan = f64::from_bits(f64::NAN.to_bits() | 1 << 63);
    assert_eq!(f64s("%f", negative_nan), "-nan");
    assert_eq!(one("%g", float(32, 1), &[0xffc0_0000]), "-nan");
    assert_eq!(f64s("%F", negative_nan), "-NAN");
    assert_eq!(f64s("%-6E|", negative_nan), "-NAN  |");
    assert_eq!(f64s("%a", negative_nan), "-nan");
    assert_eq!(f64s("%+g", f64::NAN), "+nan");
    assert_eq!(f64s("% g", f64::NAN), " nan");
    assert_eq!(f64s("%G", f64::NAN), "NAN");
    assert_eq!(f64s("%05f", f64::NAN), "  nan");
    assert_eq!(f64s("%+E", f64::INFINITY), "+INF");
    assert_eq!(f64s("% e", f64::INFINITY), " inf");
    assert_eq!(f64s("%A", f64::NEG_INFINITY), "-INF");
    assert_eq!(f64s("%06.2f", f64::NEG_INFINITY), "  -inf");
    assert_eq!(f64s("%+010a", f64::INFINITY), "      +inf");
}

/// Vector sizes, length modifiers and widths or precisions over the
/// limit are refused in words, not in Rust's debug notation.
#[test]
fn refusals_say_what_is_wrong_in_words() {
    let refused = |format: &str, arg: Arg| parse(format, &[arg]).unwrap_err();
    let e = refused("%v5f", float(32, 1));
    assert_eq!(e, "conversion 1 (`%v5f`): a vector size must be 2, 3 or 4");
    let e = refused("x %d %v", int(true, 32));
    assert_eq!(e, "conversion 2 (`%v`): a vector size must be 2, 3 or 4");
    let e = refused("%vf", float(32, 1));
    assert!(e.contains("(`%vf`): a vector size must be"), "{e}");
    let e = refused("%lld", int(true, 64));
    assert_eq!(
        e,
        "conversion 1 (`%lld`): `ll` is not a length printf takes here; `l` (as in `%ld`) \
         is the 64-bit modifier"
    );
    let e = refused("%-5hhx", int(true, 32));
    assert!(e.contains("(`%-5hhx`): `hh` is not a length"), "{e}");
    let e = refused("%zu", int(true, 32));
    assert!(e.contains("(`%zu`): `z` is not a length"), "{e}");
    let e = refused("%10000d", int(true, 32));
    assert_eq!(
        e,
        "conversion 1 (`%10000d`): its width, 10000, is over the limit of 9999"
    );
    let e = refused("%999999999d", int(true, 32));
    assert!(
        e.contains("its width, 999999999, is over the limit of 9999"),
        "{e}"
    );
    let e = refused("%99999999999999999999999d", int(true, 32));
    assert!(e.contains("its width is over the limit of 9999"), "{e}");
    let e = refused("%.10000f", float(32, 1));
    assert_eq!(
        e,
        "conversion 1 (`%.10000f`): its precision, 10000, is over the limit of 9999"
    );
    let e = refused("%5.0010000v2f", float(32, 2));
    assert!(
        e.contains("(`%5.0010000v2f`): its precision, 10000, is over"),
        "{e}"
    );
    // At the limit, as many characters as it asks for.
    assert_eq!(one("%9999d", int(true, 32), &[1]).len(), LIMIT);
    assert_eq!(one("%.9999f", float(64, 1), &f64w(0.5)).len(), LIMIT + 2);
    // What tests of the loader match stays.
    let e = refused("%q", int(true, 32));
    assert_eq!(e, "conversion 1 `%q` is not one printf knows");
}
