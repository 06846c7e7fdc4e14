import { cpus, platform, release, totalmem } from 'node:os';
import { natsServerVersion } from './nats-server.ts';

/** The machine a result was measured on. */
export interface MachineInfo {
  readonly cores: number;
  readonly cpu: string;
  readonly memoryGiB: number;
  readonly os: string;
  readonly node: string;
  readonly natsServer: string;
}

/** Describes this machine. */
export function machineInfo(): MachineInfo {
  const list = cpus();
  return {
    cores: list.length,
    cpu: list[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    os: `${platform()} ${release()}`,
    node: process.version,
    natsServer: natsServerVersion(),
  };
}

/** One line: cores, CPU, memory, OS, Node and nats-server versions. */
export function machineLine(machine: MachineInfo): string {
  return `${machine.cores} cores (${machine.cpu}), ${machine.memoryGiB} GiB, ${machine.os}, Node ${machine.node}, nats-server ${machine.natsServer}`;
}
