"""Token savings on a synthetic 500-memory set shaped like memshot's published benchmark.

5 hot identity facts, 45 warm items with regex triggers (a handful about billing and
pricing), 450 cold history notes; one billing/pricing prompt at a 4,000-token budget.
Prints the naive cost (every memory concatenated) against what resolve injects (framing
counted), the share saved, and whether every warm item whose trigger matches got in.
The set is generated here from a fixed seed: no data file. The memories go through the
public API as a library user stores them (`mnemod.open`, `Store.add`, `Store.resolve`) in
a temporary folder, with dedup limited to identical keyword sets so that all 500 stay.

    python bench/seed.py [--seed 7] [--budget 4000] [--out bench/results/seed.json]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import mnemod  # noqa: E402
from mnemod.tokens import token_counter  # noqa: E402
from results import write_results  # noqa: E402

CONFIG = {"ttl": {"context": "3650d"}, "dedup": {"threshold": 1.0}}

PROMPT = "Why did the customer's invoice go up after the pricing change to the annual plan?"

HOT = (
    "The user is Dana Whitfield, head of platform engineering at Northwind Labs.",
    "Dana prefers concise answers with code first and prose after.",
    "Timezone: Europe/Lisbon; working hours 09:00–18:00.",
    "Never paste production secrets or customer data into chat.",
    "Dana's team ships on Tuesdays and Thursdays; Friday is a change freeze.",
)

# (trigger, content) — the first five are about billing or pricing.
WARM_TOPICS = (
    (
        r"\binvoic(e|es|ing)\b",
        "Invoices are issued on the 1st; disputes go to billing@ within 30 days.",
    ),
    (
        r"\bpric(e|es|ing)\b",
        "Pricing changed on 2024-03-01: annual plans went from $96 to $120 a seat.",
    ),
    (r"\b(billing|invoice)\b", "Billing runs on Stripe; proration applies on mid-cycle upgrades."),
    (
        r"\bannual plan\b",
        "Annual plans are billed up front and renew automatically unless cancelled.",
    ),
    (r"\b(refund|pricing change)\b", "Customers moved by the pricing change get one month credit."),
    (r"\bkubernetes|k8s\b", "Clusters run k3s 1.29 on the Pi rack; upgrades need a drain first."),
    (r"\bdeploy(ment|s)?\b", "Deploys go through the release train; hotfixes need two approvals."),
    (r"\bpostgres(ql)?\b", "Postgres 16 primary with one streaming replica; backups nightly."),
    (r"\boncall|on-call\b", "On-call rotates weekly on Mondays at 10:00 Lisbon time."),
    (r"\bincident\b", "Incidents get a channel, a commander, and a postmortem within five days."),
)
SUBJECTS = (
    "the staging cluster",
    "the data pipeline",
    "the mobile app",
    "the docs site",
    "the search service",
    "the auth gateway",
    "the metrics stack",
    "the build farm",
    "the support inbox",
    "the onboarding flow",
    "the CI runners",
    "the design system",
)
VERBS = (
    "reviewed",
    "migrated",
    "debugged",
    "benchmarked",
    "documented",
    "refactored",
    "load-tested",
    "patched",
    "rolled back",
    "profiled",
    "audited",
    "redesigned",
)
DETAILS = (
    "latency dropped from 180 ms to 95 ms at the 95th percentile after the cache fix",
    "the root cause was a stale feature flag left over from the spring experiment",
    "we agreed to revisit the decision after the next quarterly planning session",
    "two follow-up tickets were filed and assigned to the infrastructure rotation",
    "the vendor confirmed the bug and promised a fix in their next minor release",
    "memory usage stayed flat over a 48-hour soak test with production traffic",
    "the team preferred the simpler design even though it costs one extra network hop",
    "a runbook entry now explains how to recover when the job stalls overnight",
)

BILLING_DETAILS = (
    "a customer asked why their invoice doubled and we traced it to seat proration",
    "finance wants the pricing page and the invoice line items to use the same plan names",
)


class Memory(NamedTuple):
    key: str
    content: str
    tier: str
    triggers: tuple[str, ...]
    created_at: datetime
    importance: int


def build(rng: random.Random, start: datetime) -> list[Memory]:
    items: list[Memory] = []

    def add(content: str, tier: str, triggers: tuple[str, ...], when: datetime, imp: int) -> None:
        items.append(Memory(f"m{len(items):03d}", content, tier, triggers, when, imp))

    for fact in HOT:
        add(fact, "hot", (), start, 5)
    for index in range(45):
        trigger, content = WARM_TOPICS[index % len(WARM_TOPICS)]
        if index >= len(WARM_TOPICS):
            trigger = rf"\b{rng.choice(SUBJECTS).split()[-1]}-{index}\b"
            content = f"Note {index} on {rng.choice(SUBJECTS)}: {rng.choice(DETAILS)}."
        add(content, "warm", (trigger,), start + timedelta(days=index), 4)
    for index in range(450):
        when = start + timedelta(days=index // 5, hours=index % 5)
        sentences = [
            f"On {when:%Y-%m-%d} we {rng.choice(VERBS)} {rng.choice(SUBJECTS)}",
            *(rng.choice(DETAILS) for _ in range(rng.randint(3, 5))),
        ]
        if rng.random() < 0.03:  # a little history really is about billing
            sentences.append(rng.choice(BILLING_DETAILS))
        add("; ".join(sentences) + ".", "cold", (), when, rng.randint(1, 5))
    return items


def measure(items: list[Memory], budget: int, now: datetime) -> dict[str, Any]:
    """Store the set, resolve the prompt once, and compare with the naive cost."""
    with tempfile.TemporaryDirectory(prefix="mnemod-seed-") as folder:
        store = mnemod.open(folder, config=CONFIG)
        try:
            with store.engine.batch():  # one save at the end, not one per add
                for item in items:
                    store.add(
                        item.content,
                        importance=item.importance,
                        key=item.key,
                        tier=item.tier,
                        triggers=list(item.triggers),
                        created_at=item.created_at,
                    )
            stored = len(store.list())
            result = store.resolve(PROMPT, budget=budget, now=now)
        finally:
            store.close()
    naive = token_counter("cl100k_base").count("\n".join(item.content for item in items))
    selected = {item.key for item in result.items}
    matching = [
        m.key
        for m in items
        if m.tier == "warm" and any(re.search(t, PROMPT, re.IGNORECASE) for t in m.triggers)
    ]
    return {
        "memories": len(items),
        "stored": stored,
        "budget": budget,
        "naive_tokens": naive,
        "selected_tokens": result.tokens_used,
        "saved": round(1 - result.tokens_used / naive, 4),
        "hot_in": sum(1 for m in items if m.tier == "hot" and m.key in selected),
        "warm_matching": len(matching),
        "warm_matching_in": sum(1 for key in matching if key in selected),
        "items_selected": len(result.items),
        "left_out": result.dropped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "seed.json"))
    args = parser.parse_args(argv)
    items = build(random.Random(args.seed), datetime(2024, 1, 1, tzinfo=UTC))
    row = measure(items, args.budget, datetime(2024, 6, 1, tzinfo=UTC))
    print(
        f"memories: {row['stored']} of {row['memories']} (5 hot, 45 warm, 450 cold); "
        f"budget {row['budget']}"
    )
    print(f"naive tokens (all memories concatenated): {row['naive_tokens']}")
    print(f"selected tokens (framing counted):        {row['selected_tokens']}")
    print(f"saved: {row['saved']:.1%}")
    print(f"hot facts in: {row['hot_in']}/5")
    print(f"matching warm items in: {row['warm_matching_in']}/{row['warm_matching']}")
    print(f"items selected: {row['items_selected']}, left out: {row['left_out']}")
    write_results(args.out, {"seed": args.seed, "prompt": PROMPT, **row})
    ok = (
        row["saved"] >= 0.89
        and row["warm_matching_in"] == row["warm_matching"]
        and row["hot_in"] == 5
        and row["stored"] == row["memories"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
