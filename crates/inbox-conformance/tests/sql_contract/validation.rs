//! (e): invalid calls are refused with SQLSTATE 45000 and write nothing.

use inbox_conformance::{Backend, Harness};

use crate::*;

// ---- (e) validation ----

/// Every refusal is SQLSTATE 45000 with a message naming the parameter, and writes nothing:
/// each failed call is followed by COMMIT, and the tables stay empty.
#[tokio::test(flavor = "multi_thread")]
async fn e_invalid_calls_are_refused_with_45000_and_write_nothing() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    let now = h.clock.now().get();
    let s = |v: &str| Some(v.to_owned());
    let base = call_to("alpha");
    let with_correlation = |i: usize, value: &str| {
        let mut c = call_to("alpha");
        c.correlation[i] = s(value);
        c
    };
    let cases: Vec<(Call, &str)> = vec![
        (
            Call { tenant_id: s(""), ..base.clone() },
            "p_tenant_id must be 1 to 64 characters from A-Z a-z 0-9 _ - . :",
        ),
        (Call { tenant_id: None, ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (Call { tenant_id: s("t 1"), ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (Call { tenant_id: s("tenantö"), ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (Call { tenant_id: Some("t".repeat(65)), ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (
            Call { recipient_kind: s(""), ..base.clone() },
            "p_recipient_kind must be 1 to 32 characters from a-z 0-9 _ -",
        ),
        (Call { recipient_kind: s("Agent"), ..base.clone() }, "p_recipient_kind must be 1 to 32"),
        (
            Call { recipient_id: s(""), ..base.clone() },
            "p_recipient_id must be 1 to 128 characters from A-Z a-z 0-9 _ - . : @",
        ),
        (Call { recipient_id: s("alpha\n"), ..base.clone() }, "p_recipient_id must be 1 to 128"),
        (Call { recipient_id: Some("r".repeat(129)), ..base.clone() }, "p_recipient_id must be 1 to 128"),
        (
            Call { event_type: s(""), ..base.clone() },
            "p_event_type must be 1 to 128 characters from A-Z a-z 0-9 _ - . :",
        ),
        (Call { event_type: s("a/b"), ..base.clone() }, "p_event_type must be 1 to 128"),
        (
            Call { priority: Some(4), ..base.clone() },
            "p_priority must be 0 (urgent), 1 (high), 2 (normal) or 3 (low)",
        ),
        (Call { priority: Some(-1), ..base.clone() }, "p_priority must be 0 (urgent)"),
        (
            Call { deduplication_key: s("has space"), ..base.clone() },
            "p_deduplication_key must be NULL or 1 to 200 printable ASCII characters without spaces",
        ),
        (Call { deduplication_key: s(""), ..base.clone() }, "p_deduplication_key must be NULL or 1 to 200"),
        (
            Call { deduplication_key: Some("k".repeat(201)), ..base.clone() },
            "p_deduplication_key must be NULL or 1 to 200",
        ),
        (Call { max_attempts: Some(0), ..base.clone() }, "p_max_attempts must be NULL or between 1 and 1000"),
        (
            Call { max_attempts: Some(1001), ..base.clone() },
            "p_max_attempts must be NULL or between 1 and 1000",
        ),
        (Call { payload_json: s("{"), ..base.clone() }, "p_payload_json is not valid JSON"),
        (Call { payload_json: s("{} {}"), ..base.clone() }, "p_payload_json is not valid JSON"),
        (Call { payload_json: s(""), ..base.clone() }, "p_payload_json is not valid JSON"),
        (
            Call { payload_json: Some(format!("\"{}\"", "x".repeat(262_143))), ..base.clone() },
            "p_payload_json is larger than 262144 bytes; pass a payload reference instead",
        ),
        (
            Call { payload_ref_type: s("room_message"), payload_ref_id: s("1"), ..base.clone() },
            "give p_payload_json or p_payload_ref_type with p_payload_ref_id, not both",
        ),
        (
            Call { payload_json: None, payload_ref_type: s("room_message"), ..base.clone() },
            "p_payload_ref_type and p_payload_ref_id must be given together",
        ),
        (
            Call {
                payload_json: None,
                payload_ref_type: Some("k".repeat(65)),
                payload_ref_id: s("1"),
                ..base.clone()
            },
            "p_payload_ref_type must be 1 to 64 bytes without control characters",
        ),
        (
            Call {
                payload_json: None,
                payload_ref_type: s("room_message"),
                payload_ref_id: s("a\u{7}"),
                ..base.clone()
            },
            "p_payload_ref_id must be 1 to 128 bytes without control characters",
        ),
        (with_correlation(0, ""), "p_company_id must be NULL or 1 to 128 bytes without control characters"),
        (with_correlation(1, "a\tb"), "p_workspace_id must be NULL or 1 to 128 bytes"),
        (with_correlation(2, &"p".repeat(129)), "p_project_id must be NULL or 1 to 128 bytes"),
        (with_correlation(3, "\n"), "p_meeting_room_id must be NULL"),
        (with_correlation(4, ""), "p_message_id must be NULL"),
        (with_correlation(5, ""), "p_routing_decision_id must be NULL"),
        (with_correlation(6, ""), "p_memory_update_id must be NULL"),
        (with_correlation(7, &"é".repeat(65)), "p_assignment_id must be NULL or 1 to 128 bytes"),
        (
            Call {
                available_at_utc: Some(now + 7_200_000),
                expires_at_utc: Some(now + 3_600_000),
                ..base.clone()
            },
            "p_expires_at_utc must be later than p_available_at_utc",
        ),
        (
            Call { available_at_utc: Some(now), expires_at_utc: Some(now), ..base.clone() },
            "p_expires_at_utc must be later than p_available_at_utc",
        ),
        (
            Call { expires_at_utc: Some(now - 3_600_000), ..base.clone() },
            "p_expires_at_utc is already in the past",
        ),
        (
            Call {
                available_at_utc: Some(now - 7_200_000),
                expires_at_utc: Some(now - 3_600_000),
                ..base.clone()
            },
            "p_expires_at_utc is already in the past",
        ),
    ];
    for (c, message) in &cases {
        sql(&mut conn, "START TRANSACTION").await;
        let outcome = call(&mut conn, c).await;
        sql(&mut conn, "COMMIT").await;
        expect_refusal(outcome, message, c);
    }
    // Outside a transaction the call is refused before it writes.
    let outcome = call(&mut conn, &base).await;
    expect_refusal(outcome, "call it inside a transaction (START TRANSACTION ... COMMIT)", &base);
    for table in ["agent_inbox", "inbox_head", "outbox_signal"] {
        assert_eq!(count(&h, table).await, 0, "a refused call wrote to {table}");
    }

    // The limits themselves are allowed.
    let at_limits = Call {
        tenant_id: Some("t".repeat(64)),
        recipient_id: Some("r".repeat(128)),
        deduplication_key: Some("~".repeat(200)),
        payload_json: Some(format!("\"{}\"", "x".repeat(262_142))),
        max_attempts: Some(1000),
        priority: Some(0),
        correlation: std::array::from_fn(|_| Some("c".repeat(128))),
        ..base.clone()
    };
    let ok = publish_committed(&mut conn, 1, &[at_limits]).await[0];
    assert_eq!((ok.inbox_seq, ok.deduplicated), (1, false));
    assert_eq!(count(&h, "agent_inbox").await, 1);
}

fn expect_refusal(outcome: Result<Published, sqlx::Error>, message: &str, c: &Call) {
    let err = match outcome {
        Ok(published) => panic!("{c:?} was accepted as {published:?}; expected {message:?}"),
        Err(err) => err,
    };
    let db = err.as_database_error().unwrap_or_else(|| panic!("{c:?}: not a database error: {err}"));
    assert_eq!(db.code().as_deref(), Some("45000"), "{c:?}: {}", db.message());
    let expected = format!("agent_inbox_publish: {message}");
    assert!(db.message().starts_with(&expected), "{c:?}: got {:?}, expected {expected:?}", db.message());
}
