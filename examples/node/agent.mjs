// mnemod from Node.js with the plain `redis` package (v4 API): add a memory, access it,
// resolve over RPC, read hot items.
//
//   cd examples/node && npm ci && REDIS_URL=unix:///path/to/.mnemod/redis/redis.sock node agent.mjs
//
// REDIS_URL is what `mnemod run` prints (or redis://[user:pass@]host:port/db for a shared
// Redis); MNEMOD_NAMESPACE defaults to "default".
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { createClient } from "redis";

const url = process.env.REDIS_URL ?? "redis://localhost:6379/0";
const base = `mnemod:{${process.env.MNEMOD_NAMESPACE ?? "default"}}`; // every key starts so
// node-redis takes redis:// URLs; a unix socket is given as a path.
const r = createClient(
  url.startsWith("unix://") ? { socket: { path: url.slice("unix://".length) } } : { url },
);
r.on("error", (err) => console.error("redis:", err.message));
await r.connect();

// 1. Add a memory: an event on the events stream (only "content" is required).
const memory = {
  content: "The user prefers metric units and the Asia/Taipei timezone.",
  type: "preference",
  importance: 4,
  key: "user.prefs",
};
await r.xAdd(`${base}:events`, "*", { op: "add", data: JSON.stringify(memory) });

// The daemon applies events in the background; wait until the key label points at an id.
let id = null;
for (let i = 0; i < 100 && !id; i++) {
  id = await r.get(`${base}:key:user.prefs`);
  if (!id) await sleep(100);
}
if (!id) throw new Error(`mnemod did not apply the add: is it running? see ${base}:dead`);
console.log("stored as", id);

// 2. Access it (by id or key label): extends its life, counts towards promotion.
await r.xAdd(`${base}:events`, "*", { op: "access", data: JSON.stringify({ id: "user.prefs" }) });

// 3. Resolve over RPC: the answer (JSON) is pushed to a list we name, outside mnemod's keys.
const replyTo = `example-reply:${randomUUID()}`;
await r.xAdd(`${base}:rpc`, "*", {
  op: "resolve",
  prompt: "Which timezone and units does the user prefer?",
  budget: "500",
  session: "example",
  reply_to: replyTo,
});
const popped = await r.blPop(replyTo, 10); // { key, element } or null after 10 s
if (!popped) throw new Error("no answer from mnemod within 10 s");
const answer = JSON.parse(popped.element);
if (!answer.ok) throw new Error(`mnemod refused the request: ${answer.error}`);
console.log(`context (${answer.tokens_used} tokens):\n${answer.text}`);

// 4. Read hot items: the five most retained L3 entries, then one item by id.
for (const hotId of await r.zRange(`${base}:hot`, 0, 4, { REV: true })) {
  console.log("hot:", hotId, await r.hGet(`${base}:m:${hotId}`, "content"));
}
console.log(await r.hGetAll(`${base}:m:${id}`));
await r.quit();
