/** Tools being served on the bus (a started tool worker), as the bridge needs them. */
export interface ServedTools {
  /**
   * Leaves discovery and lets running calls finish, for `graceMs` when given, and no longer than until `signal`
   * aborts (a tool worker's `stop`).
   */
  stop(options?: { graceMs?: number; signal?: AbortSignal }): Promise<void>;
}
