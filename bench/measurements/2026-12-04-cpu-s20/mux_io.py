# Mux-only cost of handing PyAV a Python file object (the writer since session 20) against a
# file name (FFmpeg opens it itself): 150 x264 packets of a 1080x1920 clip remuxed 20 times.
# Run: .venv/bin/python bench/measurements/2026-12-04-cpu-s20/mux_io.py
import av, time, numpy as np, os, sys
W,H,N=1080,1920,150
rng=np.random.default_rng(0)
# smooth-ish content so packets are realistic (~ tens of KB)
base=rng.integers(0,256,(H//2,W//2,3),dtype=np.uint8).repeat(2,0).repeat(2,1)
pk=[]
buf=av.open("/tmp/mux_io_src.mp4","w",format="mp4"); s=buf.add_stream("libx264",rate=25); s.width,s.height=W,H; s.pix_fmt="yuv420p"; s.options={"preset":"ultrafast","crf":"12"}
for i in range(N):
    f=av.VideoFrame.from_ndarray(np.roll(base,i*4,axis=1),format="rgb24"); f.pts=i
    buf.mux(s.encode(f))
buf.mux(s.encode(None)); buf.close()
src=av.open("/tmp/mux_io_src.mp4"); ins=src.streams.video[0]
packets=[p for p in src.demux(ins) if p.size]
print("packets",len(packets),"MB",sum(p.size for p in packets)/1e6)
def run(mode,bs=32768):
    out="/work/mux_out.mp4"
    t=time.perf_counter()
    for rep in range(20):
        fh=None
        if mode=="name": c=av.open(out,"w",format="mp4")
        else:
            fh=open(out,"wb"); c=av.open(fh,"w",format="mp4",buffer_size=bs)
        o=c.add_stream_from_template(ins)
        for p in packets:
            p.stream=o; c.mux(p)
        c.close()
        if fh: fh.close()
    return (time.perf_counter()-t)/20
for r in range(2):
  for m,bs in [("name",0),("file",32768),("file",1<<18),("file",1<<20)]:
    print(m,bs,"%.2f ms per %d packets"%(run(m,bs)*1e3,len(packets)))
os.remove("/work/mux_out.mp4")
