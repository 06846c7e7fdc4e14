/**
 * Rendezvous (highest random weight) hashing: the node, of `nodes`, that a key belongs to. Every node that holds
 * the same list picks the same one, whatever the list's order, and when a node joins or leaves only the keys of
 * that node move. The runtime uses it so that the nodes hearing a new session's first message agree, without a
 * word between them, on the one that claims it (see `SessionLeases.claim`'s `presume`).
 *
 * @example rendezvousOwner('acme.s1', ['node-a', 'node-b', 'node-c']) // → 'node-b', the same on every node
 */
export function rendezvousOwner(key: string, nodes: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestWeight = -1;
  const keyHash = fnv1a(key, 0x811c9dc5);
  for (const node of nodes) {
    const weight = mix(fnv1a(node, keyHash));
    // Ties (a 32-bit collision) go to the smaller id, so the choice never depends on the list's order.
    if (weight > bestWeight || (weight === bestWeight && best !== undefined && node < best)) {
      best = node;
      bestWeight = weight;
    }
  }
  return best;
}

/** FNV-1a over the UTF-16 code units of `text`, from `seed`: a 32-bit unsigned integer. */
function fnv1a(text: string, seed: number): number {
  let hash = seed >>> 0;
  for (let index = 0; index < text.length; index += 1) {
    hash ^= text.charCodeAt(index);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** A final avalanche (murmur3's fmix32), so that node ids differing in one character get unrelated weights. */
function mix(value: number): number {
  let hash = value;
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  return hash >>> 0;
}

/**
 * True when this node is the one of a settled fleet that sweeps for orphans this round (the rendezvous pick of
 * `orphan-sweep` among the ready nodes), or when the fleet is not settled (then every node sweeps). A sweep reads
 * the release markers written since the last one (`released-markers.ts`), so one sweeper per round keeps the
 * fleet's cost of it flat as nodes are added. Orphans of a dead node are found when it is found dead (every node
 * reads every lease then); the sweep only catches sessions released or given up with work left.
 *
 * @example if (sweepsOrphans(liveness.view(), nodeId)) await sessions.adoptOrphans();
 */
export function sweepsOrphans(view: { readonly members: readonly string[]; readonly settled: boolean }, nodeId: string): boolean {
  if (!view.settled) return true;
  const pick = rendezvousOwner('orphan-sweep', view.members);
  return pick === undefined || pick === nodeId;
}
