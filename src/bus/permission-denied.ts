/**
 * True when the server refused an operation for want of a permission: nats.js' `PermissionViolationError`, or an
 * error whose message (or a cause's) carries the server's "permissions violation" text.
 *
 * @example
 * try { await jsm.streams.purge(stream, { filter }); } catch (error) { if (isPermissionDenied(error)) fallBack(); else throw error; }
 */
export function isPermissionDenied(error: unknown): boolean {
  for (let cause = error; cause instanceof Error; cause = cause.cause) {
    if (cause.name === 'PermissionViolationError' || /permissions? violation/i.test(cause.message)) return true;
  }
  return false;
}
