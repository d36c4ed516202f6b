// The HTTP API from TypeScript (Node 18+ or a browser; no SDK needed): store, then recall.
// Run it with memoryd up and a key for the agent (MEMORYD_URL for a gateway elsewhere):
//   npm install && MEMORYD_KEY=mdk_... npm start -- [agent-id]
const gateway = process.env.MEMORYD_URL ?? "http://127.0.0.1:8765";
const agent = process.argv[2] ?? "agent-1";
const headers = { Authorization: `Bearer ${process.env.MEMORYD_KEY}`, "Content-Type": "application/json" };

interface Stored { id: string; stored: boolean; duplicate: boolean }
interface Hit { memory: { id: string; content: string }; score: number }

async function call<T>(path: string, body: unknown): Promise<T> {
  const response = await fetch(`${gateway}/v1/agents/${agent}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
  const payload = await response.json();
  if (!response.ok) throw new Error(`${payload.error.type}: ${payload.error.message}`);
  return payload as T;
}

const stored = await call<Stored>("/memories", { content: "User prefers dark mode", role: "user", session_id: "s1" });
console.log(stored.duplicate ? "already stored as" : "stored as", stored.id);
const hits = await call<Hit[]>("/recall", { query: "what theme does the user like?", limit: 5 });
console.log(hits[0].memory.content, hits[0].score);
