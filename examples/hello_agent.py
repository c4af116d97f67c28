"""Two agents in one process: one offers a capability, the other calls it.

    python examples/hello_agent.py
"""

import os

import trio

import ampcap
from ampcap.wire.identity import Identity

greeter = ampcap.Peer(Identity.generate(os.urandom))  # or ampcap.Peer() for the default identity file


@greeter.capability("org.example.greet", version="1.0.0")
async def greet(name: str, excited: bool = False) -> dict[str, str]:
    """Greets somebody (the input schema comes from the type hints)."""
    return {"greeting": f"Hello, {name}{'!' if excited else '.'}"}


@greeter.capability("org.example.count", version="1.0.0")
async def count(to: int, ctx: ampcap.InvocationContext) -> dict[str, int]:
    """Counts slowly, reporting PROGRESS to the caller."""
    for i in range(to):
        await ctx.sleep(20)
        await ctx.progress(100 * (i + 1) / to, f"{i + 1} of {to}")
    return {"counted": to}


async def main() -> None:
    async with greeter.serve("amp://127.0.0.1:0") as server:
        print("serving at", server.url, "as", server.did)
        async with ampcap.connect(server.url, identity=Identity.generate(os.urandom)) as remote:
            versions = await remote.query("org.example.greet")
            print("declared:", [d.id for d in versions])
            print(await remote.invoke("org.example.greet", version="1.0.0", params={"name": "Ada"}))
            print(await remote.invoke("org.example.count:1.0.0", params={"to": 3},
                                      on_progress=lambda pct, text: print(f"  progress {pct}% {text}")))
            try:
                await remote.invoke("org.example.greet", version="9.0.0", params={"name": "Ada"})
            except ampcap.AmpError as exc:
                print("as expected:", exc)


if __name__ == "__main__":
    trio.run(main)
