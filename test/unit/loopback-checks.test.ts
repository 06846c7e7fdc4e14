import { describe, expect, it } from 'vitest';
import { isLoopbackAddress, isLoopbackHost } from '../../src/service/http-basics.ts';

// The dashboard, the chat gateway and the A2A server share these two checks: which bind address keeps a server on
// this machine, and which Host header a loopback-bound server answers (a DNS-rebinding page sends its own name).

describe('isLoopbackAddress', () => {
  it('takes the loopback bind addresses', () => {
    for (const address of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]']) expect(isLoopbackAddress(address)).toBe(true);
  });

  it('refuses every address others can reach, and look-alikes', () => {
    for (const address of ['0.0.0.0', '::', '10.0.0.1', '192.168.1.5', '127.evil.example', '127.0.0.1.nip.io', 'localhost.example', '']) {
      expect(isLoopbackAddress(address)).toBe(false);
    }
  });
});

describe('isLoopbackHost', () => {
  it('takes loopback Host headers with or without a port', () => {
    for (const host of ['localhost', 'localhost:4280', '127.0.0.1:4281', '127.9.9.9', '[::1]', '[::1]:4282']) expect(isLoopbackHost(host)).toBe(true);
  });

  it('refuses a missing Host and any name a page could point at 127.0.0.1', () => {
    for (const host of [undefined, '', 'attacker.example', 'attacker.example:4280', '127.0.0.1.nip.io:4280', 'localhost.attacker.example', '[::2]:4280']) {
      expect(isLoopbackHost(host)).toBe(false);
    }
  });
});
