"""A check's shard is the partition Kafka's own producer puts its name in, and shards are even.

The Java side is Kafka itself: the client jar the test brokers run from, its
``BuiltInPartitioner.partitionForKey`` (what ``KafkaProducer`` calls for a keyed record), run
by ``java`` on a one-file program. No broker is needed.
"""

from __future__ import annotations

import random
import statistics
import string
import subprocess
from pathlib import Path

import pytest

from alivemcp.cluster.shards import ShardMap, shard_of
from alivemcp.testbed.kafka import default_libs_dir, fetch_kafka_libs, java_available

#: Kafka's own murmur2 vectors (clients/src/test/.../common/utils/UtilsTest.java): the signed
#: 32-bit hash of each key.
KAFKA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}

_PARTITIONER = """
import java.nio.charset.StandardCharsets;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;

public class Partitions {
    public static void main(String[] args) throws Exception {
        int partitions = Integer.parseInt(args[0]);
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = line.getBytes(StandardCharsets.UTF_8);
            out.append(BuiltInPartitioner.partitionForKey(key, partitions)).append('\\n');
        }
        System.out.print(out);
    }
}
"""


@pytest.mark.parametrize(("key", "signed"), sorted(KAFKA_MURMUR2.items()))
def test_shard_is_kafkas_murmur2_positive_mod_partitions(key: str, signed: int) -> None:
    positive = signed & 0x7FFFFFFF
    for partitions in (1, 7, 12, 60, 1000):
        assert shard_of(key, partitions) == positive % partitions


def _names(count: int, seed: int = 15) -> list[str]:
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "-_.:/"
    names = [f"mcp-{i}" for i in range(count // 2)]
    names += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        for _ in range(count - len(names) - 3)
    ]
    names += ["ünïcødé-check", "名前", "emoji-🚀"]  # multi-byte UTF-8 keys
    return names


def test_shard_equals_the_java_producers_partition(tmp_path: Path) -> None:
    assert java_available(), "Java 17+ is needed (it runs the test brokers too)"
    libs = default_libs_dir()
    if not (libs / ".alivemcp-kafka-libs").exists():
        libs = fetch_kafka_libs(libs)
    source = tmp_path / "Partitions.java"
    source.write_text(_PARTITIONER)
    names = _names(3000)
    for partitions in (12, 60):
        done = subprocess.run(
            ["java", "-cp", f"{libs}/*", str(source), str(partitions)],
            input="\n".join(names) + "\n",
            capture_output=True,
            text=True,
            timeout=120,
            encoding="utf-8",
        )
        assert done.returncode == 0, done.stderr[-2000:]
        java = [int(x) for x in done.stdout.split()]
        assert len(java) == len(names)
        ours = [shard_of(name, partitions) for name in names]
        differ = [(n, o, j) for n, o, j in zip(names, ours, java, strict=True) if o != j]
        assert not differ, differ[:5]


def test_checks_spread_evenly_over_shards() -> None:
    # 100,000 names in 60 shards: a uniform hash puts 1,667 +- 41 (one standard deviation)
    # in each; every shard within 5 deviations (a biased or clustering hash is far off).
    names = [f"server-{i}.example-{i % 97}" for i in range(100_000)]
    counts = [0] * 60
    for name in names:
        counts[shard_of(name, 60)] += 1
    mean = statistics.fmean(counts)
    sigma = (len(names) * (1 / 60) * (59 / 60)) ** 0.5
    assert all(abs(c - mean) < 5 * sigma for c in counts), counts
    assert statistics.pstdev(counts) < 1.5 * sigma


def test_shard_map_caches_and_forgets() -> None:
    shards = ShardMap(12)
    assert [shards(n) for n in ("a", "b")] == [shard_of("a", 12), shard_of("b", 12)]
    assert shards.names_in(["a", "b", "c"], frozenset({shard_of("c", 12)})) == [
        n for n in ("a", "b", "c") if shard_of(n, 12) == shard_of("c", 12)
    ]
    shards.retain(["b"])
    assert set(shards._of) == {"b"}
