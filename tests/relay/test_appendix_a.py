"""RFC 003 Appendix A: which test drives each vector (all fifteen, against
the core). The map is checked, so a vector cannot lose its test unnoticed."""

from __future__ import annotations

import importlib

import pytest

VECTORS = {
    "A.1 TTL=0 offline rejection": "test_ingress:test_a1_ttl0_offline_is_refused_2003_and_never_queued",
    "A.2 polling redelivery until commit": "test_commit_poll:test_a2_polling_redelivers_until_commit",
    "A.3 recipient ACK commit": "test_commit_poll:test_a3_recipient_ack_commits_and_record_is_done",
    "A.4 multi-recipient partial commit": "test_commit_poll:test_a4_multi_recipient_partial_commit",
    "A.5 federation loop rejection": "test_federation:test_a5_loop_is_refused_2003_without_receipt_or_queueing",
    "A.6 hop-limit exhaustion": "test_federation:test_a6_hop_limit_zero_is_refused_and_the_upstream_keeps_it_local",
    "A.7 duplicate suppression": "test_federation:test_a7_duplicate_handoff_returns_the_first_receipt_and_one_entry",
    "A.8 transfer rollback on timeout": "test_federation:test_a8_no_receipt_before_the_timeout_rolls_back_and_retries",
    "A.9 single-custody acceptance": "test_federation:test_a9_single_custody_moves_only_after_a_valid_receipt",
    "A.10 invalid transfer receipt":
        "test_federation:test_a10_receipt_from_the_wrong_signer_or_tuple_is_3001_and_no_custody",
    "A.11 unsupported receipt alg": "test_federation:test_a11_unsupported_receipt_alg_is_3001",
    "A.12 dual-custody commit receipt": "test_federation:test_a12_dual_custody_commit_receipt_finalizes_upstream",
    "A.13 multi-recipient federation split": "test_federation:test_a13_multi_recipient_message_is_split_per_recipient",
    "A.14 unsupported commit receipt alg": "test_federation:test_a14_unsupported_commit_receipt_alg_is_3001",
    # 2003 -> 19 07 d3 in the ERROR (A.1 test) and the forward response (A.5);
    # 3001 -> 19 0b b9 in forward and commit-report responses.
    "A.15 byte-level codes": "test_federation:test_rfc002_a9_forward_from_an_untrusted_or_mismatched_principal_is_3001",
}


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_every_vector_has_its_test(vector: str) -> None:
    module, name = VECTORS[vector].split(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_a15_both_byte_forms() -> None:
    from ampcap.relay.federation import encode_commit_answer, encode_forward_answer, ForwardAnswer
    assert b"\x19\x07\xd3" in encode_forward_answer(ForwardAnswer(accepted=False, error_code=2003))
    assert b"\x19\x0b\xb9" in encode_commit_answer(False, 3001)
