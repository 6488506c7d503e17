"""The end of a writer batch: telling subscribers what changed, one message per changed
entry on the namespace's `changes` channel (`{"op": "add", "id": "01J…"}`), and
acknowledging its events, which the batch's record made durable.

Both go to Redis in the script that writes the batch's hot layer (redisio.hot_batch), after
its writes, or in a script of their own when the batch changed nothing hot: one round trip
where the write, a PUBLISH script and an XACK were three, each before an agent saw its
event acknowledged. Atomic with the write: a subscriber told of a change finds it, and an
acknowledged event's item is there. The script runs where the namespace's slot is (it
names the events stream as a key), and a cluster delivers its PUBLISHes to the
subscribers of every node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from mnemod.redisio.keys import GROUP, Keys

ACK_CHUNK = 1000  # ids per XACK (a Lua unpack takes a few thousand at most)

# A Lua function for the scripts that end a batch. From ARGV[t]: the channel, the position
# of the events stream in KEYS, the consumer group, how many messages, the messages, then
# the event ids to acknowledge.
END_LUA = f"""
local function batch_end(t)
  local n = tonumber(ARGV[t + 3])
  for i = t + 4, t + 3 + n do redis.call('publish', ARGV[t], ARGV[i]) end
  local stream, group = KEYS[tonumber(ARGV[t + 1])], ARGV[t + 2]
  for i = t + 4 + n, #ARGV, {ACK_CHUNK} do
    redis.call('xack', stream, group, unpack(ARGV, i, math.min(i + {ACK_CHUNK - 1}, #ARGV)))
  end
end
"""


@dataclass(frozen=True)
class BatchEnd:
    """A batch's change messages and the events it acknowledges."""

    messages: list[bytes]
    acks: list[str]

    @classmethod
    def of(cls, changes: Mapping[str, str], acks: Sequence[str] = ()) -> BatchEnd:
        """Each entry id's last op, and `acks` (event ids of a durable record)."""
        messages = [_dumps({"op": op, "id": entry_id}) for entry_id, op in changes.items()]
        return cls(messages, list(acks))

    def args(self, keys: Keys, stream_at: int) -> list[str | bytes | int]:
        """The arguments `batch_end` reads, the events stream at `stream_at` in KEYS."""
        return [keys.changes, stream_at, GROUP, len(self.messages), *self.messages, *self.acks]


def _dumps(data: object) -> bytes:
    """`{"op":"add","id":"…"}`: compact, text as UTF-8 (as json.dumps(ensure_ascii=False))."""
    return orjson.dumps(data)
