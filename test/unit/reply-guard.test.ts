import { describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { InvalidInputError } from '../../src/errors.ts';
import type { Refusal } from '../../src/refusal-log.ts';
import { checkReply, createReplyGuard, parseTrustedInboxes, replyPolicyFromBus, replyPolicyOf } from '../../src/bus/reply-guard.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';

const sealed: ReplyPolicy = { open: false, trusted: [] };
const open: ReplyPolicy = { open: true, trusted: [] };
const allowed = (policy: ReplyPolicy, reply: string | undefined, tenant?: string) => checkReply(policy, { reply, tenant }).allowed;

describe('checkReply on a tenant subject', () => {
  it('answers the tenant its own inbox', () => {
    expect(allowed(sealed, '_INBOX_acme.Hc4xyz.1', 'acme')).toBe(true);
    expect(allowed(sealed, '_INBOX_acme.x', 'acme')).toBe(true);
  });

  it('refuses another tenant’s inbox, and one that only starts like the tenant’s', () => {
    expect(allowed(sealed, '_INBOX_globex.Hc4xyz.1', 'acme')).toBe(false);
    expect(allowed(sealed, '_INBOX_acmecorp.x', 'acme')).toBe(false);
    expect(allowed(sealed, '_INBOX_acme', 'acme')).toBe(false);
  });

  it('refuses the subjects of buckets, streams, the JetStream API, the log and anything else', () => {
    for (const reply of [
      '$KV.AGENTBUS_STATE.globex.k',
      '$KV.AGENTBUS_TOMBSTONES.globex.s1',
      '$KV.AGENTBUS_LEASES.globex.s1',
      '$KV.AGENTBUS_NODES.node-1',
      '$O.AGENTBUS_MEMORY.C.x',
      '$JS.API.STREAM.PURGE.AGENTBUS_LOG',
      '$SRV.PING',
      'agentbus.globex.sessions.s1.log',
      'agentbus.acme.sessions.s1.log',
      'anything.at.all',
      '_INBOX.abc',
    ]) {
      expect({ reply, allowed: allowed(sealed, reply, 'acme') }).toEqual({ reply, allowed: false });
    }
  });

  it('answers the services’, the client’s and the operator’s inboxes, and a service import’s _R_ reply', () => {
    for (const reply of ['_INBOX_runtime.a.b', '_INBOX_tools.a', '_INBOX_memory.a', '_INBOX_provider.a', '_INBOX_dashboard.a', '_INBOX_hooks.a', '_INBOX_client.a', '_INBOX_operator.a', '_R_.abc.def']) {
      expect({ reply, allowed: allowed(sealed, reply, 'acme') }).toEqual({ reply, allowed: true });
    }
    expect(allowed(sealed, '_R_', 'acme')).toBe(false);
  });

  it('answers a request without a reply subject (there is nothing to answer)', () => {
    expect(allowed(sealed, undefined, 'acme')).toBe(true);
    expect(allowed(sealed, '', 'acme')).toBe(true);
  });

  it('answers no tenant inbox for a tenant token that is not one', () => {
    expect(allowed(sealed, '_INBOX_a$b.x', 'a$b')).toBe(false);
  });
});

describe('checkReply on a subject of no tenant', () => {
  it('answers service inboxes and _R_, and no tenant’s', () => {
    expect(allowed(sealed, '_INBOX_runtime.x.y')).toBe(true);
    expect(allowed(sealed, '_R_.x')).toBe(true);
    expect(allowed(sealed, '_INBOX_acme.x')).toBe(false);
    expect(allowed(sealed, '$KV.AGENTBUS_STATE.acme.k')).toBe(false);
  });
});

describe('checkReply refuses subjects that are not one literal subject', () => {
  it.each(['_INBOX_acme.*', '_INBOX_acme.>', '_INBOX_acme..x', '_INBOX_acme.x.', '_INBOX_acme. x', '_INBOX_acme.x\ty', '_INBOX_acme.a*b', '.', `_INBOX_acme.${'x'.repeat(600)}`])(
    '%j',
    (reply) => {
      const verdict = checkReply(open, { reply, tenant: 'acme' });
      expect(verdict.allowed).toBe(false);
    },
  );
});

describe('open deployments and extra prefixes', () => {
  it('answers nats.js’ default _INBOX only in an open deployment', () => {
    expect(allowed(open, '_INBOX.Hc4.1', 'acme')).toBe(true);
    expect(allowed(open, '_INBOX.Hc4.1')).toBe(true);
    expect(allowed(sealed, '_INBOX.Hc4.1', 'acme')).toBe(false);
    // Open is no licence for the rest.
    expect(allowed(open, '$KV.AGENTBUS_STATE.globex.k', 'acme')).toBe(false);
  });

  it('answers the prefixes an operator trusts, on every subject', () => {
    const policy: ReplyPolicy = { open: false, trusted: ['_INBOX_billing', 'apps.crm.inbox'] };
    expect(allowed(policy, '_INBOX_billing.x', 'acme')).toBe(true);
    expect(allowed(policy, 'apps.crm.inbox.x')).toBe(true);
    expect(allowed(policy, 'apps.crm.inboxes.x')).toBe(false);
    expect(allowed(policy, '_INBOX_billingx.x')).toBe(false);
  });
});

describe('parseTrustedInboxes', () => {
  it('reads a comma-separated list, dropping blanks, trailing dots and .>', () => {
    expect(parseTrustedInboxes(' _INBOX_billing, _INBOX_crm.>, ,apps.x., _INBOX_billing ')).toEqual(['_INBOX_billing', '_INBOX_crm', 'apps.x']);
    expect(parseTrustedInboxes(undefined)).toEqual([]);
    expect(parseTrustedInboxes('')).toEqual([]);
  });

  it.each([
    ['$KV.AGENTBUS_STATE', /under \$/],
    ['$JS', /under \$/],
    ['agentbus', /bus prefix/],
    ['agentbus.acme', /bus prefix/],
    ['_INBOX', /shared _INBOX/],
    ['_INBOX.>', /shared _INBOX/],
    ['a.*', /literal/],
    ['>', /literal/],
    ['a..b', /literal/],
    ['a b', /literal/],
  ])('refuses %j', (value, message) => {
    expect(() => parseTrustedInboxes(value)).toThrow(InvalidInputError);
    expect(() => parseTrustedInboxes(value)).toThrow(message);
  });

  it('refuses prefixes under another bus prefix when told it', () => {
    expect(() => parseTrustedInboxes('acme.bus.x', { subjectPrefix: 'acme.bus' })).toThrow(/bus prefix acme\.bus/);
    expect(parseTrustedInboxes('agentbus.x', { subjectPrefix: 'acme.bus' })).toEqual(['agentbus.x']);
  });
});

describe('the policy of a service', () => {
  it('is sealed for a named user, open without one (no auth, or a token only)', () => {
    expect(replyPolicyFromBus({ user: 'memory', inboxPrefix: '_INBOX_memory' }, {})).toEqual({ open: false, trusted: [] });
    expect(replyPolicyFromBus({ inboxPrefix: '_INBOX_memory' }, {})).toEqual({ open: true, trusted: [] });
    expect(replyPolicyFromBus({ inboxPrefix: '_INBOX_memory' }, { NATS_TOKEN: 's3cret' })).toEqual({ open: true, trusted: [] });
  });

  it('is sealed for a connection with a client certificate (users mapped from certificates)', () => {
    expect(replyPolicyFromBus({ tls: { certFile: '/etc/agentbus/memory.pem' } }, {}).open).toBe(false);
  });

  it('trusts its own custom inbox and AGENTBUS_TRUSTED_INBOXES, and throws on a bad list', () => {
    expect(replyPolicyFromBus({ user: 'rt2', inboxPrefix: '_INBOX_rt2' }, { AGENTBUS_TRUSTED_INBOXES: '_INBOX_app' })).toEqual({ open: false, trusted: ['_INBOX_rt2', '_INBOX_app'] });
    expect(() => replyPolicyFromBus({ user: 'memory' }, { AGENTBUS_TRUSTED_INBOXES: '$KV' })).toThrow(InvalidInputError);
    expect(() => replyPolicyFromBus({ user: 'memory' }, { AGENTBUS_PREFIX: 'bus', AGENTBUS_TRUSTED_INBOXES: 'bus.x' })).toThrow(/bus prefix bus/);
  });

  it('is read from a connection’s own options when the host passes none', () => {
    const connection = (options: object) => ({ options }) as unknown as NatsConnection;
    expect(replyPolicyOf(connection({ user: 'tools', inboxPrefix: '_INBOX_tools' }))).toEqual({ open: false, trusted: [] });
    expect(replyPolicyOf(connection({}))).toEqual({ open: true, trusted: [] });
    expect(replyPolicyOf(connection({ token: 't' }))).toEqual({ open: true, trusted: [] });
    expect(replyPolicyOf(connection({ tls: { certFile: 'c.pem' } })).open).toBe(false);
  });
});

describe('createReplyGuard', () => {
  it('admits what the policy allows and logs one refusal, with the subjects cut short, for the rest', () => {
    const refused: Refusal[] = [];
    const guard = createReplyGuard({ policy: sealed, refusals: { refused: (refusal) => refused.push(refusal) } });
    expect(guard.admits({ subject: 'agentbus.acme.state.load', reply: '_INBOX_acme.x' }, 'acme')).toBe(true);
    expect(guard.admits({ subject: 'agentbus.acme.state.load' }, 'acme')).toBe(true);
    expect(refused).toEqual([]);
    expect(guard.admits({ subject: 'agentbus.acme.state.load', reply: '$KV.AGENTBUS_STATE.globex.k' }, 'acme')).toBe(false);
    expect(refused).toEqual([
      expect.objectContaining({ code: 'denied', subject: 'agentbus.acme.state.load', reply: '$KV.AGENTBUS_STATE.globex.k', tenant: 'acme', message: expect.stringContaining('_INBOX_acme.') }),
    ]);
    expect(guard.admits({ subject: 'agentbus.tools.x.call', reply: `$KV.${'y'.repeat(300)}` })).toBe(false);
    expect(String(refused[1]!.reply).length).toBeLessThanOrEqual(201);
  });
});
