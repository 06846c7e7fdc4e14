/**
 * A server config (for `useNatsServer`) with a user `nopurge` that may do everything but purge a stream, as a server
 * config written before the runtime purged KV markers; a connection without credentials is `admin`.
 */
export const NO_PURGE_CONFIG = `no_auth_user: admin
authorization {
  users = [
    { user: admin, password: admin }
    { user: nopurge, password: nopurge, permissions: { publish: { allow: [">"], deny: ["$JS.API.STREAM.PURGE.>"] }, subscribe: { allow: [">"] } } }
  ]
}`;
