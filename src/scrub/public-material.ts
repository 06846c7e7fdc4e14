/**
 * Public material that looks random: public keys, certificates, digests and the ids of objects at a
 * provider. The high-entropy rule keeps these; the critical patterns and secretlint still look at them.
 */

// Subresource-integrity digests (`sha1-…` in old package-lock.json files, `sha512-…` in new ones).
const INTEGRITY_DIGEST = /^sha(?:1|256|384|512)-/;

// Ids of model providers' objects: tool call ids are logged with every call and mean nothing without the key.
const PROVIDER_OBJECT_ID = /^(?:call|toolu|srvtoolu|msg|req|resp|run|thread|asst|batch|file|chatcmpl)[_-][A-Za-z0-9]+$/;

// Stripe's object ids (payment intents, charges, events, customers, …), not its keys (`sk_live_`, `rk_live_`,
// `whsec_`), nor a payment intent's client secret (`pi_…_secret_…`), which holds a second `_`.
const STRIPE_OBJECT_ID =
  /^(?:pi|ch|evt|cus|pm|py|re|in|ii|il|sub|si|price|prod|txn|tr|po|seti|src|card|acct|ba|cbtxn|plink|cs_(?:test|live))_[A-Za-z0-9]+$/;

// The type names an SSH public key blob starts with: `ssh-ed25519`, `ssh-rsa`, `ecdsa-sha2-nistp256`,
// `sk-ssh-ed25519@openssh.com`, `ssh-rsa-cert-v01@openssh.com`, …
const SSH_KEY_TYPE = /^(?:ssh|ecdsa|sk)-[a-z0-9@.+-]{2,60}$/;

// Blocks of public PEM material; the body must be base64 and whitespace alone, so nothing else hides in it.
const PUBLIC_PEM_BLOCK =
  /-----BEGIN (CERTIFICATE|TRUSTED CERTIFICATE|PUBLIC KEY|RSA PUBLIC KEY|CERTIFICATE REQUEST|NEW CERTIFICATE REQUEST|X509 CRL)-----[A-Za-z0-9+/=\s]*-----END \1-----/g;

// A digest's label before the token: go.sum's `h1:`.
const DIGEST_LABEL = /(?:^|[^A-Za-z0-9_])h1:$/;

/**
 * True when `token` is an SSH public key blob (`AAAAC3NzaC1lZDI1NTE5…` after `ssh-ed25519` in an
 * authorized_keys or known_hosts line): base64 of a 4-byte length and a key type name. Decoded, not
 * matched on its prefix, so every key type is kept; a private key's base64 never starts this way.
 */
export function isSshPublicKeyBlob(token: string): boolean {
  if (!token.startsWith('AAAA')) return false;
  const head = Buffer.from(token.slice(0, 96), 'base64');
  if (head.length < 4) return false;
  const length = head.readUInt32BE(0);
  return length >= 7 && length <= 64 && head.length >= 4 + length && SSH_KEY_TYPE.test(head.toString('latin1', 4, 4 + length));
}

/**
 * True when `token` is public by its form: an integrity digest, a provider's object id (`call_…`,
 * `toolu_…`, Stripe's `pi_…`, `evt_…`, `cus_…`) or an SSH public key blob.
 */
export function isPublicToken(token: string): boolean {
  return INTEGRITY_DIGEST.test(token) || PROVIDER_OBJECT_ID.test(token) || STRIPE_OBJECT_ID.test(token) || isSshPublicKeyBlob(token);
}

/** True when the token at `start` of `text` follows a digest's label (`h1:` in go.sum). */
export function followsDigestLabel(text: string, start: number): boolean {
  return start >= 3 && DIGEST_LABEL.test(text.slice(Math.max(0, start - 4), start));
}

/**
 * The spans `[start, end)` of public PEM blocks in `text` (certificates, public keys, certificate requests,
 * CRLs), whose bodies are public and random. A block counts only with its END line and a body of base64
 * and whitespace; in a JSON line whose escapes are blanked, `\n` reads as whitespace.
 */
export function findPublicBlocks(text: string): Array<readonly [number, number]> {
  if (!text.includes('-----BEGIN ')) return [];
  return Array.from(text.matchAll(PUBLIC_PEM_BLOCK), (match) => [match.index, match.index + match[0].length] as const);
}
