import { timingSafeEqual } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { InvalidInputError } from '../errors.ts';

// What every agentbus HTTP service (the dashboard, the chat gateway) does the same way: errors as JSON, secrets
// compared in constant time, and the loopback Host check against DNS rebinding.

/** An HTTP error with a status and a snake_case code; its message is shown to the caller. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** Whether a presented secret equals the expected one, in time that does not depend on where they differ. */
export function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Whether a request's Host header names a loopback host (`localhost`, `127.x.y.z`, `[::1]`): a server bound to
 * loopback answers only those, so that a web page cannot reach it through a DNS name that resolves to 127.0.0.1.
 */
export function isLoopbackHost(host: string | undefined): boolean {
  if (!host) return false;
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.split(':')[0]!;
  return name === 'localhost' || name === '127.0.0.1' || name === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(name);
}

/** Whether an address a server binds to (`127.0.0.1`, `localhost`, `::1`, `127.x.y.z`) is reached from this machine only. */
export function isLoopbackAddress(address: string): boolean {
  return address === 'localhost' || address === '::1' || address === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(address);
}

/** Sends a JSON body with the given headers, not cached. */
export function sendJson(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store', ...headers });
  response.end(text);
}

/** Parses a port: an integer 0–65535 (0 = any free port). */
export function parsePort(value: string, what: string): number {
  const port = Number(value);
  if (value.trim() === '' || !Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new InvalidInputError(`${what} must be a port number 0-65535 (0 picks a free one), got ${JSON.stringify(value)}`);
  }
  return port;
}
