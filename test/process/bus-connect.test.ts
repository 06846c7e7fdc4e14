import { execFileSync } from 'node:child_process';
import { createConnection } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { busOptionsFromEnv, busTlsFromEnv, connectBus, splitServers, tlsConnectOption } from '../../src/bus/connect.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { BusConnectOptions } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix, inboxPrefixOf } from '../../src/bus/inbox.ts';
import { cliInboxPrefix, connectCli } from '../../cli/connect.ts';
import { InvalidInputError } from '../../src/errors.ts';
import { createLogger } from '../../src/logging.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import { startShippedNats } from '../helpers/shipped-nats.ts';
import type { ShippedNats } from '../helpers/shipped-nats.ts';

const logger = createLogger({ name: 'bus-connect-test', level: 'silent' });

describe('connection options from the environment', () => {
  it("gives a service its own inbox prefix, unless AGENTBUS_INBOX_PREFIX names another", () => {
    expect(busOptionsFromEnv({ NATS_USER: 'tools', NATS_PASSWORD: 'p' }, ServiceInboxPrefix.tools)).toEqual({ user: 'tools', pass: 'p', inboxPrefix: '_INBOX_tools' });
    expect(busOptionsFromEnv({ AGENTBUS_INBOX_PREFIX: '_INBOX_tools_acme' }, ServiceInboxPrefix.tools)).toEqual({ inboxPrefix: '_INBOX_tools_acme' });
  });

  it("gives the CLI the inbox prefix of the user it logs in as: a tenant's is _INBOX_<tenant>", () => {
    expect(cliInboxPrefix({ NATS_USER: 'acme' })).toBe('_INBOX_acme');
    expect(cliInboxPrefix({ NATS_USER: 'client', AGENTBUS_INBOX_PREFIX: '_INBOX_app' })).toBe('_INBOX_app');
    // No user (a server without auth), or one that is not a subject token: nats.js' default.
    expect(cliInboxPrefix({})).toBeUndefined();
    expect(cliInboxPrefix({ NATS_USER: 'alice smith' })).toBeUndefined();
  });

  it("reads a cluster's servers from one comma-separated URL, for services and the CLI alike, and TLS from any tls:// among them", async () => {
    expect(splitServers(' nats://a:4222, nats://b:4222 ,,nats://c:4222')).toEqual(['nats://a:4222', 'nats://b:4222', 'nats://c:4222']);
    expect(tlsConnectOption('nats://a:4222,tls://b:4222', undefined)).toEqual({ tls: {} });
    expect(tlsConnectOption('nats://a:4222,nats://b:4222', undefined)).toEqual({});
    // The CLI connects though one of the servers listed does not answer (read as one server, the URL named only the last).
    const server = await startNatsServer();
    try {
      const nc = await connectCli(`${server.url},nats://127.0.0.1:1`, 'split-test', {});
      expect(nc.getServer()).toBe(server.url.replace('nats://', ''));
      await nc.close();
    } finally {
      await server.stop();
    }
  });

  it('keeps reconnecting, as the services do, for a command that serves or follows until stopped', async () => {
    const server = await startNatsServer();
    try {
      const serving = await connectCli(server.url, 'serving-test', {}, { reconnectForever: true });
      const once = await connectCli(server.url, 'once-test', {});
      // nats.js gives up after 10 tries (about 20 s) unless told otherwise; a worker must outlive a longer NATS restart.
      const optionsOf = (nc: unknown) => (nc as { options: { maxReconnectAttempts?: number; reconnectTimeWait?: number } }).options;
      expect(optionsOf(serving)).toMatchObject({ maxReconnectAttempts: -1, reconnectTimeWait: 500 });
      expect(optionsOf(once).maxReconnectAttempts).toBe(10);
      await Promise.all([serving.close(), once.close()]);
    } finally {
      await server.stop();
    }
  });

  it('reads the TLS files as the nats CLI names them, and refuses a client certificate without its key', () => {
    expect(busTlsFromEnv({})).toEqual({});
    expect(busTlsFromEnv({ NATS_CA: '/etc/agentbus/ca.pem' })).toEqual({ tls: { caFile: '/etc/agentbus/ca.pem' } });
    expect(busTlsFromEnv({ NATS_CERT: 'c.pem', NATS_KEY: 'c.key' })).toEqual({ tls: { certFile: 'c.pem', keyFile: 'c.key' } });
    expect(() => busTlsFromEnv({ NATS_CERT: 'c.pem' })).toThrow(InvalidInputError);
    expect(() => busTlsFromEnv({ NATS_KEY: 'c.key' })).toThrow(/NATS_CERT and NATS_KEY go together/);
  });
});

// A CA, a server certificate for 127.0.0.1 signed by it, a client certificate, and another CA that signed nothing
// of this server's, made with the openssl CLI; nats-server runs the shipped conf with a tls block added.
const hasOpenssl = (() => {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe.skipIf(!hasOpenssl)('TLS', () => {
  let dir: string;
  let server: ShippedNats;
  let verifying: ShippedNats;
  const file = (name: string) => join(dir, name);

  function openssl(...args: string[]): void {
    execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  }

  function makeCa(name: string): void {
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.pem`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  }

  async function makeSigned(name: string, ca: string, extensions: string): Promise<void> {
    await writeFile(file(`${name}.ext`), extensions);
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-days', '1', '-out', `${name}.pem`, '-extfile', `${name}.ext`);
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'agentbus-tls-'));
    makeCa('ca');
    makeCa('other-ca');
    await makeSigned('server', 'ca', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
    await makeSigned('client', 'ca', 'extendedKeyUsage=clientAuth\n');
    const tls = `cert_file: ${JSON.stringify(file('server.pem'))}\n  key_file: ${JSON.stringify(file('server.key'))}\n  timeout: 2`;
    server = await startShippedNats({ extraConfig: `tls {\n  ${tls}\n}` });
    verifying = await startShippedNats({ extraConfig: `tls {\n  ${tls}\n  ca_file: ${JSON.stringify(file('ca.pem'))}\n  verify: true\n}` });
  }, 30_000);

  afterAll(async () => {
    await server?.stop();
    await verifying?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const asRuntime = (nats: ShippedNats): Pick<BusConnectOptions, 'servers' | 'name' | 'logger' | 'user' | 'pass' | 'connectTimeoutMs'> => ({
    servers: nats.url,
    name: 'tls-test',
    logger,
    user: 'runtime',
    pass: nats.passwords['runtime']!,
    connectTimeoutMs: 3000,
  });

  it('connects a service through connectBus with the CA of NATS_CA, and works over it (JetStream, its own inbox)', async () => {
    const nc = await connectBus({ ...asRuntime(server), ...busOptionsFromEnv({ NATS_CA: file('ca.pem') }, ServiceInboxPrefix.runtime) });
    try {
      expect(nc.info?.tls_required).toBe(true);
      expect(inboxPrefixOf(nc)).toBe('_INBOX_runtime');
      // A JetStream request, answered in _INBOX_runtime over the encrypted connection.
      const jsm = await jetstreamManager(nc);
      expect((await jsm.getAccountInfo()).limits).toBeDefined();
    } finally {
      await nc.close();
    }
  });

  it('refuses a plain connection, a server certificate from another CA, and one the system CAs do not know', async () => {
    // A client that speaks plain NATS after the server's INFO (nats.js would switch to TLS itself) is cut off.
    const plain = await new Promise<{ received: string; closed: boolean }>((resolve) => {
      let received = '';
      const socket = createConnection(server.port, '127.0.0.1');
      socket.on('data', (chunk: Buffer) => {
        if (!received) socket.write(`CONNECT ${JSON.stringify({ user: 'runtime', pass: server.passwords['runtime'], verbose: false })}\r\nPING\r\n`);
        received += chunk.toString('latin1');
      });
      socket.on('error', () => undefined);
      socket.on('close', () => resolve({ received, closed: true }));
      setTimeout(() => (socket.destroy(), resolve({ received, closed: false })), 5000).unref();
    });
    expect(plain.received).toMatch(/^INFO .*"tls_required":true/);
    expect(plain.received).not.toContain('PONG');
    expect(plain.closed).toBe(true);
    await expect(connectBus({ ...asRuntime(server), tls: { caFile: file('other-ca.pem') } })).rejects.toThrow('unable to verify the first certificate');
    await expect(connectBus({ ...asRuntime(server), servers: `tls://127.0.0.1:${server.port}` })).rejects.toThrow('unable to verify the first certificate');
    // The same URL with the right CA is served: the refusals above were the certificate's, not the URL's.
    const nc = await connectBus({ ...asRuntime(server), servers: `tls://127.0.0.1:${server.port}`, tls: { caFile: file('ca.pem') } });
    await nc.close();
  });

  it('makes a tls:// URL or NATS_CA refuse a server that does not speak TLS', async () => {
    const plain = await startShippedNats();
    try {
      await expect(connectBus({ ...asRuntime(plain), servers: `tls://127.0.0.1:${plain.port}` })).rejects.toThrow(/tls/i);
      await expect(connectBus({ ...asRuntime(plain), tls: { caFile: file('ca.pem') } })).rejects.toThrow(/tls/i);
    } finally {
      await plain.stop();
    }
  });

  it('gives a server that verifies clients the certificate of NATS_CERT and NATS_KEY, and refuses a client without one', async () => {
    const env = { NATS_USER: 'client', NATS_PASSWORD: verifying.passwords['client']!, NATS_CA: file('ca.pem') };
    // The server ends the handshake; nats.js sees only that the connection never became ready.
    await expect(connectBus({ ...asRuntime(verifying), ...busTlsFromEnv({ NATS_CA: file('ca.pem') }), connectTimeoutMs: 1500 })).rejects.toThrow();
    expect(verifying.output()).toContain("TLS handshake error: tls: client didn't provide a certificate");
    const nc = await connectCli(verifying.url, 'tls-cli', { ...env, NATS_CERT: file('client.pem'), NATS_KEY: file('client.key') });
    try {
      expect(inboxPrefixOf(nc)).toBe('_INBOX_client');
      await nc.flush();
    } finally {
      await nc.close();
    }
  });

  it('runs a service process over TLS from its environment alone', async () => {
    const runtime = startServiceProcess('services/runtime/main.ts', {
      NATS_URL: `tls://127.0.0.1:${server.port}`,
      NATS_USER: 'runtime',
      NATS_PASSWORD: server.passwords['runtime']!,
      NATS_CA: file('ca.pem'),
    });
    try {
      await runtime.waitFor('runtime started', 20_000);
    } finally {
      await runtime.stop('SIGTERM');
    }
    expect(server.output()).not.toMatch(/Violation/);
  });
});
