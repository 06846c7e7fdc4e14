/** The message a service process sends its parent (over the IPC channel) once it serves. */
export interface ReadyMessage {
  readonly type: 'agentbus.ready';
  readonly service: string;
  /** Where the service can be reached, when it serves HTTP (the dashboard). */
  readonly url?: string;
}

/**
 * Tells a parent process (`agentbus up`, a test) that this service serves, and makes the service stop (SIGTERM to
 * itself) when that parent goes away; a no-op without an IPC channel.
 */
export function notifyReady(service: string, extra: { url?: string } = {}): void {
  const message: ReadyMessage = { type: 'agentbus.ready', service, ...(extra.url === undefined ? {} : { url: extra.url }) };
  if (!process.send) return;
  process.send(message);
  // The channel closes when the parent dies, even by SIGKILL: drain and exit rather than live on as an orphan
  // that nobody supervises or stops.
  process.once('disconnect', () => process.kill(process.pid, 'SIGTERM'));
  // A 'disconnect' (or 'message') listener refs the IPC channel, and a ref'd channel keeps the event loop alive
  // after the service has drained: the process then lingers until its supervisor SIGKILLs it. The service's own
  // connection and servers keep it running; the channel only listens while they do.
  process.channel?.unref();
}

/** True when an IPC message is a {@link ReadyMessage}. */
export function isReadyMessage(value: unknown): value is ReadyMessage {
  return typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'agentbus.ready';
}
