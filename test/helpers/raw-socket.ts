/** Plain TCP to a test server, for what fetch() hides: connection timing and the bytes on the wire. */
import { readdir, readFile, readlink } from "node:fs/promises";
import { connect, type Socket } from "node:net";

/** A connection to 127.0.0.1:`port`, once established. */
export function openSocket(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Everything the server sends until it closes the connection. */
export function readUntilClosed(socket: Socket): Promise<string> {
  let text = "";
  socket.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
  return new Promise((resolve, reject) => {
    socket.once("close", () => resolve(text));
    socket.once("error", reject);
  });
}

/**
 * Bytes still waiting in the server's receive queues of established connections to `port`
 * (/proc/net/tcp, hex `rx_queue`), or of the one from `clientPort` only: 0 once the server
 * process has read everything its clients sent. For a server in another process, where no
 * event says how far it has read; Linux only.
 */
export async function unreadByServer(port: number, clientPort?: number): Promise<number> {
  const hex = (n: number) => `:${n.toString(16).toUpperCase().padStart(4, "0")}`;
  let unread = 0;
  for (const line of (await readFile("/proc/net/tcp", "utf8")).split("\n").slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 5 || !fields[1].endsWith(hex(port)) || fields[3] !== "01") continue;
    if (clientPort !== undefined && !fields[2].endsWith(hex(clientPort))) continue;
    unread += parseInt(fields[4].split(":")[1], 16);
  }
  return unread;
}

/**
 * Which of `pids` holds the server's end of the connection from `clientPort` to `port` (Linux:
 * the socket's inode in /proc/net/tcp, looked up among each process's descriptors); undefined
 * while none does (a cluster primary is still handing it over). For telling which worker of
 * `castor serve --workers N` serves a connection before it has answered anything.
 */
export async function serverProcessOf(port: number, clientPort: number, pids: readonly number[]): Promise<number | undefined> {
  const hex = (n: number) => `:${n.toString(16).toUpperCase().padStart(4, "0")}`;
  let inode: string | undefined;
  for (const line of (await readFile("/proc/net/tcp", "utf8")).split("\n").slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields.length > 9 && fields[1].endsWith(hex(port)) && fields[2].endsWith(hex(clientPort))) inode = fields[9];
  }
  if (inode === undefined || inode === "0") return undefined;
  const target = `socket:[${inode}]`;
  for (const pid of pids) {
    const fds = await readdir(`/proc/${pid}/fd`).catch(() => [] as string[]);
    for (const fd of fds) {
      if ((await readlink(`/proc/${pid}/fd/${fd}`).catch(() => "")) === target) return pid;
    }
  }
  return undefined;
}
