#![allow(clippy::unwrap_used, reason = "tests")]

use super::proc::{Cpu, stat_ticks};
use super::text::Prose;
use super::*;

#[test]
fn prose_is_seeded_and_sized_in_words() {
    let a = Prose::new(7).text(1000);
    assert_eq!(a, Prose::new(7).text(1000));
    assert_ne!(a, Prose::new(8).text(1000));
    assert_eq!(a.split_whitespace().count(), 775);
    assert!(a.chars().next().unwrap().is_uppercase());
}

#[test]
fn unique_prompts_differ_from_the_first_byte_and_the_conversation_grows_to_the_target() {
    let opts = Opts {
        prompt_tokens: 2_000,
        unique_prompts: 3,
        conversation_turns: 4,
        turn_tokens: 100,
        answer_tokens: 20,
        summary_from_turn: 2,
        settle_ms: 0,
    };
    let p = prompts(&opts, 1);
    assert_eq!(p.unique.len(), 3);
    let firsts: Vec<&str> = (p.unique.iter())
        .flat_map(|(a, b)| [&a[0].content[..23], &b[0].content[..23]])
        .collect();
    for (i, a) in firsts.iter().enumerate() {
        assert!(a.starts_with("Ticket "));
        assert!(firsts[i + 1..].iter().all(|b| b != a), "{firsts:?}");
    }
    // 2000 − 4 × 100 tokens of system prompt (1,240 words), 80-token questions (62 words).
    assert_eq!(p.system.content.split_whitespace().count(), 1_240);
    assert_eq!(p.questions.len(), 4);
    assert!(
        p.questions
            .iter()
            .all(|q| q.split_whitespace().count() == 62)
    );
}

#[test]
fn stat_ticks_are_utime_plus_stime() {
    let line = "4242 (kthena router) S 1 2 3 0 -1 4194304 100 0 0 0 250 31 0 0 20 0 9 0 7393052";
    assert_eq!(stat_ticks(line), 281);
}

#[test]
fn cpu_prefers_the_thread_clocks_unless_the_ticks_show_more() {
    let a = Cpu {
        ticks: 100,
        thread_ns: 1_000_000_000,
    };
    let b = Cpu {
        ticks: 101,
        thread_ns: 1_004_500_000,
    };
    assert!((a.ms_until(b) - 4.5).abs() < 1e-9);
    // A thread with 50 ms of CPU exited in between.
    let c = Cpu {
        ticks: 106,
        thread_ns: 1_004_500_000,
    };
    assert!((a.ms_until(c) - 60.0).abs() < 1e-9);
}

fn sample(cpu: f64, ttfb: f64) -> Sample {
    Sample {
        prompt_tokens: 1000,
        router_cpu_ms: cpu,
        ttfb_ms: ttfb,
        direct_ttfb_ms: 1.0,
    }
}

#[test]
fn the_table_has_a_row_per_build_and_their_ratio() {
    let c = |label: &str, k: f64| Contender {
        label: label.to_owned(),
        program: PathBuf::from(label),
        idle_ms_per_s: 0.1,
        unique: vec![sample(80.0 * k, 90.0), sample(84.0 * k, 94.0)],
        turns: vec![
            sample(70.0, 71.0),
            sample(20.0 * k, 22.0),
            sample(24.0 * k, 26.0),
        ],
    };
    let r = Report {
        prompt_tokens: 100_000,
        summary_from_turn: 2,
        tokenizer_alone_ms: vec![40.0, 42.0],
        contenders: vec![c("baseline", 1.0), c("new", 0.5)],
    };
    let md = r.markdown();
    assert!(
        md.contains("| baseline | 82.0 | 91.0 | 22.00 | 23.0 |"),
        "{md}"
    );
    assert!(md.contains("| new | 41.0 | 91.0 | 11.00 | 23.0 |"), "{md}");
    assert!(md.contains("| baseline / new | 2.0× | | 2.0× | |"), "{md}");
    assert!(
        md.contains("alone on the same unique prompts: 41.0 ms"),
        "{md}"
    );
    assert!(md.contains("spends 1.00× that"), "{md}");
    assert!(
        md.contains("| 2 | 1000 | 20.00 | 21.0 | 10.00 | 21.0 |"),
        "{md}"
    );
}
