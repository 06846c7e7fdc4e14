/** The message a service process sends its parent (over the IPC channel) once it serves. */
export interface ReadyMessage {
  readonly type: 'agentbus.ready';
  readonly service: string;
}

/** Tells a parent process (`agentbus up`, a test) that this service serves; a no-op without an IPC channel. */
export function notifyReady(service: string): void {
  const message: ReadyMessage = { type: 'agentbus.ready', service };
  process.send?.(message);
}

/** True when an IPC message is a {@link ReadyMessage}. */
export function isReadyMessage(value: unknown): value is ReadyMessage {
  return typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'agentbus.ready';
}
