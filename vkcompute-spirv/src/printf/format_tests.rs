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
    // A huge width is read as at most four digits and then fails to find
    // its conversion rather than allocating.
    assert!(parse("%99999999d", &[int(true, 32)]).is_err());
}
