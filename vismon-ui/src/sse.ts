// Read a Server-Sent Events stream with fetch (EventSource cannot send the bearer token).
import type { Client } from "./api/client";
import { SseParser, type SseEvent } from "./shape";

export async function readEvents(
  client: Client,
  path: string,
  onEvent: (e: SseEvent) => void,
  signal: AbortSignal,
): Promise<void> {
  const r = await client.raw("GET", path, undefined, signal);
  if (r.body === null) throw new Error("the event stream has no body");
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    for (const e of parser.feed(value)) onEvent(e);
  }
}
