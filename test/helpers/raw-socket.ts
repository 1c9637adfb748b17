/** Plain TCP to a test server, for what fetch() hides: connection timing and the bytes on the wire. */
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
